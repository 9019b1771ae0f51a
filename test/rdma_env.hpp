// What every RDMA test needs: the device under test and the GID that reaches it.
// Without a device this fails loudly — an RDMA test that skips would hide a broken test bed.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/test/unit_test.hpp>

#include "coverbs/verbs/device.hpp"
#include "test_address.hpp"

namespace coverbs::test {

/// The device the RDMA tests run on: the one carrying $COVERBS_VM_IP inside the test bed,
/// else the first device of the machine.
struct rdma_env {
  verbs::device dev = open();
  verbs::gid_entry gid = pick_gid(dev);

  static verbs::device open() {
    if (verbs::device::names().empty()) {
      BOOST_FAIL("no RDMA device: run RDMA tests through test/rdma-launcher (Soft-RoCE VM)");
    }
    if (auto address = device_address()) return verbs::device::open_for(*address);
    return verbs::device::open();
  }
  static verbs::gid_entry pick_gid(const verbs::device& dev) {
    if (auto address = device_address()) return dev.gid_for(*address);
    return dev.default_gid();
  }
};

}  // namespace coverbs::test
