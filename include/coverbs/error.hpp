// Error codes for RDMA work completions and for the library's own failures.
#pragma once

#include <infiniband/verbs.h>

#include <boost/system/error_code.hpp>
#include <system_error>

namespace coverbs {

/// The error type used in every completion signature (Asio's, which can hold a std::error_code).
using error_code = boost::system::error_code;

/// Work-completion statuses as error-code values (the numbers are libibverbs' `ibv_wc_status`).
enum class wc_errc {
  local_length = IBV_WC_LOC_LEN_ERR,
  local_qp_operation = IBV_WC_LOC_QP_OP_ERR,
  local_eec_operation = IBV_WC_LOC_EEC_OP_ERR,
  local_protection = IBV_WC_LOC_PROT_ERR,
  flushed = IBV_WC_WR_FLUSH_ERR,
  memory_window_bind = IBV_WC_MW_BIND_ERR,
  bad_response = IBV_WC_BAD_RESP_ERR,
  local_access = IBV_WC_LOC_ACCESS_ERR,
  remote_invalid_request = IBV_WC_REM_INV_REQ_ERR,
  remote_access = IBV_WC_REM_ACCESS_ERR,
  remote_operation = IBV_WC_REM_OP_ERR,
  retry_exceeded = IBV_WC_RETRY_EXC_ERR,
  rnr_retry_exceeded = IBV_WC_RNR_RETRY_EXC_ERR,
  local_rdd_violation = IBV_WC_LOC_RDD_VIOL_ERR,
  remote_invalid_rd_request = IBV_WC_REM_INV_RD_REQ_ERR,
  remote_aborted = IBV_WC_REM_ABORT_ERR,
  invalid_eecn = IBV_WC_INV_EECN_ERR,
  invalid_eec_state = IBV_WC_INV_EEC_STATE_ERR,
  fatal = IBV_WC_FATAL_ERR,
  response_timeout = IBV_WC_RESP_TIMEOUT_ERR,
  general = IBV_WC_GENERAL_ERR,
  tag_matching = IBV_WC_TM_ERR,
  tag_matching_rendezvous_incomplete = IBV_WC_TM_RNDV_INCOMPLETE,
};

/// Failures detected by the library itself rather than reported by the device.
enum class errc {
  no_device = 1,        ///< no RDMA device has the requested name, or serves the address
  bad_descriptor,       ///< bytes from a peer do not form a valid descriptor (remote_buffer)
  buffer_too_small,     ///< a local buffer is shorter than the operation needs
  misaligned_atomic,    ///< atomics need an 8-byte aligned address on both ends
  malformed_frame,      ///< what a peer sent breaks the wire protocol (a TCP-fallback frame; an
                        ///< RDMA SEND longer than the receive buffer it landed in)
  too_many_operations,  ///< the connection holds `socket_options::max_outstanding_operations` already
  registration_limit,   ///< registering would pass `socket_options::max_registered_bytes`
  stale_connection,     ///< the peer's CM still holds a connection from this QP number
};

/// The category of `wc_errc`: messages name the verbs status, conditions map to `std::errc`.
const std::error_category& wc_category() noexcept;
/// The category of `errc`.
const std::error_category& library_category() noexcept;

inline std::error_code make_error_code(wc_errc e) noexcept {
  return {static_cast<int>(e), wc_category()};
}
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), library_category()};
}
/// Maps a completion status; `IBV_WC_SUCCESS` gives an empty code.
inline std::error_code make_error_code(ibv_wc_status status) noexcept {
  if (status == IBV_WC_SUCCESS) return {};
  return {static_cast<int>(status), wc_category()};
}

}  // namespace coverbs

template <>
struct std::is_error_code_enum<coverbs::wc_errc> : std::true_type {};
template <>
struct std::is_error_code_enum<coverbs::errc> : std::true_type {};
