#include <boost/asio/error.hpp>
#include <boost/test/unit_test.hpp>
#include <string>

#include "coverbs/error.hpp"

BOOST_AUTO_TEST_SUITE(error)

BOOST_AUTO_TEST_CASE(every_completion_status_has_a_readable_message) {
  for (int s = IBV_WC_LOC_LEN_ERR; s <= IBV_WC_TM_RNDV_INCOMPLETE; ++s) {
    const auto ec = coverbs::make_error_code(static_cast<ibv_wc_status>(s));
    BOOST_TEST(static_cast<bool>(ec));
    BOOST_TEST(ec.category().name() == std::string("coverbs.wc"));
    BOOST_TEST(ec.message().find(ibv_wc_status_str(static_cast<ibv_wc_status>(s))) != std::string::npos);
  }
  BOOST_TEST(!coverbs::make_error_code(IBV_WC_SUCCESS));
}

BOOST_AUTO_TEST_CASE(statuses_map_to_portable_conditions) {
  using coverbs::wc_errc;
  BOOST_TEST((coverbs::make_error_code(wc_errc::remote_access) == std::errc::permission_denied));
  BOOST_TEST((coverbs::make_error_code(wc_errc::flushed) == std::errc::operation_canceled));
  BOOST_TEST((coverbs::make_error_code(wc_errc::retry_exceeded) == std::errc::timed_out));
  BOOST_TEST((coverbs::make_error_code(wc_errc::local_length) == std::errc::message_size));
  BOOST_TEST((coverbs::make_error_code(wc_errc::remote_access) != std::errc::timed_out));
}

BOOST_AUTO_TEST_CASE(asio_error_code_carries_the_category) {
  // Handlers receive boost::system::error_code; it must compare equal to the std code.
  const coverbs::error_code ec = coverbs::make_error_code(coverbs::wc_errc::remote_access);
  BOOST_TEST((ec == coverbs::make_error_code(coverbs::wc_errc::remote_access)));
  BOOST_TEST((ec == std::errc::permission_denied));
  BOOST_TEST(ec.message().find("remote access") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(library_errors_have_messages_and_conditions) {
  const auto ec = coverbs::make_error_code(coverbs::errc::no_device);
  BOOST_TEST(ec.message() == "RDMA device not found");
  BOOST_TEST((ec == std::errc::no_such_device));
  BOOST_TEST((coverbs::make_error_code(coverbs::errc::bad_descriptor) == std::errc::bad_message));
}

BOOST_AUTO_TEST_CASE(limit_errors_say_which_limit) {
  // What a caller retries (an operation slot frees) differs from what it must not (memory).
  const auto ops = coverbs::make_error_code(coverbs::errc::too_many_operations);
  BOOST_TEST(ops.message() == "too many operations outstanding on this connection");
  BOOST_TEST((ops == std::errc::resource_unavailable_try_again));
  const auto memory = coverbs::make_error_code(coverbs::errc::registration_limit);
  BOOST_TEST(memory.message() == "the connection's registered memory limit would be exceeded");
  BOOST_TEST((memory == std::errc::not_enough_memory));
  // A stale connection is the one CM rejection worth retrying (with a new queue pair).
  const auto stale = coverbs::make_error_code(coverbs::errc::stale_connection);
  BOOST_TEST(stale.message().find("stale") != std::string::npos);
  BOOST_TEST((stale == std::errc::resource_unavailable_try_again));
}

BOOST_AUTO_TEST_SUITE_END()
