// An open RDMA device (ibv_context) and the choice of GID that addresses it.
#pragma once

#include <infiniband/verbs.h>

#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace coverbs::verbs {

/// One usable entry of a port's GID table.
struct gid_entry {
  ibv_gid gid{};
  std::uint8_t port = 1;
  std::uint32_t index = 0;
  ibv_gid_type type = IBV_GID_TYPE_IB;
};

/// An open device context. Owns the `ibv_context` unless adopted from rdma_cm.
class device {
 public:
  /// Names of the RDMA devices present (empty where the kernel has none).
  static std::vector<std::string> names();

  /// Opens the device called `name`, or the first device when `name` is empty.
  /// Throws std::system_error with `errc::no_device` when there is none.
  static device open(std::string_view name = {});

  /// Opens the device whose GID table holds `address` (RoCE v2 entries preferred).
  static device open_for(const boost::asio::ip::address& address);

  /// Wraps a context owned by someone else (for example an rdma_cm id); it is not closed here.
  static device adopt(ibv_context* context) noexcept;

  /// The libibverbs handle.
  ibv_context* native_handle() const noexcept { return context_.get(); }
  /// The kernel's device name, e.g. "rxe0".
  std::string name() const;
  /// Device capabilities (queue depths, atomics, inline limits).
  ibv_device_attr attributes() const;
  /// The state and active MTU of one port.
  ibv_port_attr port_attributes(std::uint8_t port = 1) const;
  /// Every valid GID of every port.
  std::vector<gid_entry> gids() const;
  /// The GID that carries `address`, RoCE v2 before v1 before IB; throws `errc::no_device`.
  gid_entry gid_for(const boost::asio::ip::address& address) const;
  /// The best GID for reaching peers when no address is given (first RoCE v2 IPv4 entry,
  /// else the first entry of port 1).
  gid_entry default_gid() const;

 private:
  struct closer {
    bool owned = true;
    void operator()(ibv_context* c) const noexcept {
      if (owned && c != nullptr) ibv_close_device(c);
    }
  };
  explicit device(ibv_context* context, bool owned) noexcept : context_(context, closer{owned}) {}
  std::unique_ptr<ibv_context, closer> context_;
};

/// The GID bytes that RoCE uses for an IP address (IPv4 is mapped into ::ffff:a.b.c.d).
ibv_gid gid_of(const boost::asio::ip::address& address) noexcept;

}  // namespace coverbs::verbs
