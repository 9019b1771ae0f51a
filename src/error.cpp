#include "coverbs/error.hpp"

#include <string>

namespace coverbs {
namespace {

class wc_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "coverbs.wc"; }

  std::string message(int value) const override {
    return std::string("RDMA work completion: ") +
           ibv_wc_status_str(static_cast<ibv_wc_status>(value));
  }

  // Portable conditions let callers test `ec == std::errc::permission_denied` without
  // knowing verbs; the mapping follows what the status means to the application.
  std::error_condition default_error_condition(int value) const noexcept override {
    switch (static_cast<ibv_wc_status>(value)) {
      case IBV_WC_REM_ACCESS_ERR:
      case IBV_WC_LOC_PROT_ERR:
      case IBV_WC_LOC_ACCESS_ERR:
        return std::errc::permission_denied;
      case IBV_WC_LOC_LEN_ERR:
        return std::errc::message_size;
      case IBV_WC_WR_FLUSH_ERR:
        return std::errc::operation_canceled;
      case IBV_WC_RETRY_EXC_ERR:
      case IBV_WC_RESP_TIMEOUT_ERR:
        return std::errc::timed_out;
      case IBV_WC_RNR_RETRY_EXC_ERR:
        return std::errc::no_buffer_space;
      case IBV_WC_REM_INV_REQ_ERR:
      case IBV_WC_REM_INV_RD_REQ_ERR:
      case IBV_WC_LOC_QP_OP_ERR:
        return std::errc::invalid_argument;
      case IBV_WC_REM_ABORT_ERR:
        return std::errc::connection_aborted;
      default:
        return std::errc::io_error;
    }
  }
};

class library_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "coverbs"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::no_device: return "RDMA device not found";
      case errc::bad_descriptor: return "malformed descriptor from peer";
      case errc::buffer_too_small: return "buffer too small for the operation";
      case errc::misaligned_atomic: return "atomic operation on an address not aligned to 8 bytes";
      case errc::malformed_frame: return "malformed or inconsistent frame from peer";
      case errc::too_many_operations: return "too many operations outstanding on this connection";
      case errc::registration_limit: return "the connection's registered memory limit would be exceeded";
      case errc::stale_connection:
        return "the peer's connection manager still holds a connection from this queue pair (stale)";
    }
    return "unknown coverbs error";
  }

  std::error_condition default_error_condition(int value) const noexcept override {
    switch (static_cast<errc>(value)) {
      case errc::no_device: return std::errc::no_such_device;
      case errc::bad_descriptor: return std::errc::bad_message;
      case errc::buffer_too_small: return std::errc::no_buffer_space;
      case errc::misaligned_atomic: return std::errc::invalid_argument;
      case errc::malformed_frame: return std::errc::bad_message;
      case errc::too_many_operations: return std::errc::resource_unavailable_try_again;
      case errc::registration_limit: return std::errc::not_enough_memory;
      case errc::stale_connection: return std::errc::resource_unavailable_try_again;
    }
    return {value, *this};
  }
};

}  // namespace

const std::error_category& wc_category() noexcept {
  static const wc_category_impl instance;
  return instance;
}

const std::error_category& library_category() noexcept {
  static const library_category_impl instance;
  return instance;
}

}  // namespace coverbs
