#include "coverbs/verbs/device.hpp"

#include <algorithm>
#include <cstring>

#include "coverbs/detail/throw_error.hpp"
#include "coverbs/error.hpp"

namespace coverbs::verbs {
namespace {

struct device_list {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  ~device_list() {
    if (list != nullptr) ibv_free_device_list(list);
  }
  device_list() = default;
  device_list(const device_list&) = delete;
  device_list& operator=(const device_list&) = delete;
};

[[noreturn]] void throw_no_device(const std::string& what) {
  throw std::system_error(make_error_code(errc::no_device), what);
}

// RoCE v2 routes over IP and is what rdma_cm picks too; a v1 or IB GID with the same bytes
// would give an address handle the peer cannot answer, the most common set-up bug.
int preference(ibv_gid_type type) {
  switch (type) {
    case IBV_GID_TYPE_ROCE_V2: return 0;
    case IBV_GID_TYPE_ROCE_V1: return 1;
    default: return 2;
  }
}

}  // namespace

ibv_gid gid_of(const boost::asio::ip::address& address) noexcept {
  ibv_gid gid{};
  const auto v6 = address.is_v4()
                      ? boost::asio::ip::make_address_v6(boost::asio::ip::v4_mapped, address.to_v4())
                      : address.to_v6();
  const auto bytes = v6.to_bytes();
  std::memcpy(gid.raw, bytes.data(), sizeof gid.raw);
  return gid;
}

std::vector<std::string> device::names() {
  device_list devices;
  std::vector<std::string> result;
  for (int i = 0; i < devices.count; ++i) result.emplace_back(ibv_get_device_name(devices.list[i]));
  return result;
}

device device::open(std::string_view name) {
  device_list devices;
  for (int i = 0; i < devices.count; ++i) {
    if (!name.empty() && name != ibv_get_device_name(devices.list[i])) continue;
    ibv_context* context = ibv_open_device(devices.list[i]);
    if (context == nullptr) detail::throw_errno("ibv_open_device");
    return device(context, true);
  }
  throw_no_device(name.empty() ? std::string("opening the first RDMA device")
                               : "opening RDMA device " + std::string(name));
}

device device::open_for(const boost::asio::ip::address& address) {
  for (const auto& name : names()) {
    device candidate = open(name);
    for (const auto& entry : candidate.gids()) {
      if (std::memcmp(entry.gid.raw, gid_of(address).raw, sizeof entry.gid.raw) == 0) {
        return candidate;
      }
    }
  }
  throw_no_device("looking for the RDMA device of " + address.to_string());
}

device device::adopt(ibv_context* context) noexcept { return device(context, false); }

std::string device::name() const { return ibv_get_device_name(context_->device); }

ibv_device_attr device::attributes() const {
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(context_.get(), &attr); rc != 0) {
    detail::throw_errno("ibv_query_device", rc);
  }
  return attr;
}

ibv_port_attr device::port_attributes(std::uint8_t port) const {
  ibv_port_attr attr{};
  if (int rc = ibv_query_port(context_.get(), port, &attr); rc != 0) {
    detail::throw_errno("ibv_query_port", rc);
  }
  return attr;
}

std::vector<gid_entry> device::gids() const {
  const auto attr = attributes();
  std::vector<ibv_gid_entry> table(static_cast<std::size_t>(attr.phys_port_cnt) * 256);
  const ssize_t n = ibv_query_gid_table(context_.get(), table.data(), table.size(), 0);
  if (n < 0) detail::throw_errno("ibv_query_gid_table", static_cast<int>(-n));
  std::vector<gid_entry> result;
  for (ssize_t i = 0; i < n; ++i) {
    const auto& e = table[static_cast<std::size_t>(i)];
    result.push_back({e.gid, static_cast<std::uint8_t>(e.port_num), e.gid_index,
                      static_cast<ibv_gid_type>(e.gid_type)});
  }
  return result;
}

gid_entry device::gid_for(const boost::asio::ip::address& address) const {
  const ibv_gid wanted = gid_of(address);
  auto entries = gids();
  std::erase_if(entries, [&](const gid_entry& e) {
    return std::memcmp(e.gid.raw, wanted.raw, sizeof wanted.raw) != 0;
  });
  if (entries.empty()) throw_no_device(name() + " has no GID for " + address.to_string());
  return *std::min_element(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return preference(a.type) < preference(b.type);
  });
}

gid_entry device::default_gid() const {
  auto entries = gids();
  if (entries.empty()) throw_no_device(name() + " has no valid GID");
  auto v4_roce2 = std::find_if(entries.begin(), entries.end(), [](const gid_entry& e) {
    static constexpr unsigned char mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return e.type == IBV_GID_TYPE_ROCE_V2 &&
           std::memcmp(e.gid.raw, mapped_prefix, sizeof mapped_prefix) == 0;
  });
  return v4_roce2 != entries.end() ? *v4_roce2 : entries.front();
}

}  // namespace coverbs::verbs
