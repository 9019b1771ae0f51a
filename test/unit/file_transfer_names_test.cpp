// The file-transfer example's rules for what a peer sends: which names the server takes, and
// how a peer's text is shown in logs (examples/file_transfer/protocol.hpp).
#include <boost/test/unit_test.hpp>
#include <string>

#include "../../examples/file_transfer/protocol.hpp"

BOOST_AUTO_TEST_SUITE(file_transfer_names)

BOOST_AUTO_TEST_CASE(plain_names_only) {
  BOOST_TEST(ft::valid_name("big.bin"));
  BOOST_TEST(ft::valid_name("café.txt"));  // bytes of 0x80 and above are no control characters
  BOOST_TEST(ft::valid_name(std::string(255, 'b')));
  BOOST_TEST(!ft::valid_name(std::string(256, 'b')));
  BOOST_TEST(!ft::valid_name(""));
  BOOST_TEST(!ft::valid_name("../escape"));
  BOOST_TEST(!ft::valid_name("dir/file"));
  BOOST_TEST(!ft::valid_name(".hidden"));
  BOOST_TEST(!ft::valid_name("new\nline"));
  BOOST_TEST(!ft::valid_name("tab\there"));
  BOOST_TEST(!ft::valid_name("escape\x1b[2J"));
  BOOST_TEST(!ft::valid_name("del\x7f"));
  BOOST_TEST(!ft::valid_name(std::string("nul\0byte", 8)));
}

BOOST_AUTO_TEST_CASE(printable_escapes_what_could_forge_a_line) {
  BOOST_TEST(ft::printable("big.bin") == "big.bin");
  BOOST_TEST(ft::printable("café") == "café");
  BOOST_TEST(ft::printable("new\nline") == "new\\x0aline");
  BOOST_TEST(ft::printable("\x1b[2J") == "\\x1b[2J");
  BOOST_TEST(ft::printable("a\\x0ab") == "a\\x5cx0ab");  // an escape is never faked
}

// A peer's error text is shown as printable() gives it, wherever it is logged afterwards.
BOOST_AUTO_TEST_CASE(a_peer_error_text_is_decoded_printable) {
  const auto bytes = ft::encode(ft::msg::error("x\nfile_server: [1] received evil"));
  const auto m = ft::decode(bytes);
  BOOST_TEST_REQUIRE(m.has_value());
  BOOST_TEST((m->kind == ft::type::error));
  BOOST_TEST(m->text == "x\\x0afile_server: [1] received evil");
}

BOOST_AUTO_TEST_SUITE_END()
