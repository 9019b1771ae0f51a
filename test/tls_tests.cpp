// The bodies declared in tls_tests.hpp, compiled once for both transports' tests.

#include "tls_tests.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <vector>

#include "connected_pair.hpp"

namespace coverbs::test {

/// A fresh P-256 key and a self-signed certificate for `name`, valid for an hour.
struct throwaway_certificate {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{EVP_EC_gen("P-256"), &EVP_PKEY_free};
  std::unique_ptr<X509, decltype(&X509_free)> cert{X509_new(), &X509_free};

  explicit throwaway_certificate(const char* name) {
    BOOST_REQUIRE(key && cert);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
    X509_set_pubkey(cert.get(), key.get());
    X509_NAME* subject = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name), -1,
                               -1, 0);
    X509_set_issuer_name(cert.get(), subject);
    BOOST_REQUIRE(X509_sign(cert.get(), key.get(), EVP_sha256()) > 0);
  }
};

/// Handshake (the client verifying the server's certificate and name), 256 KiB each way in
/// TLS records, then close_notify both ways; the payload arrives intact on both sides.
void tls_echo(transport kind) {
  namespace asio = boost::asio;
  namespace ssl = asio::ssl;
  throwaway_certificate identity("coverbs-test");
  ssl::context server_context(ssl::context::tls_server), client_context(ssl::context::tls_client);
  BOOST_REQUIRE(SSL_CTX_use_certificate(server_context.native_handle(), identity.cert.get()) == 1);
  BOOST_REQUIRE(SSL_CTX_use_PrivateKey(server_context.native_handle(), identity.key.get()) == 1);
  BOOST_REQUIRE(
      X509_STORE_add_cert(SSL_CTX_get_cert_store(client_context.native_handle()), identity.cert.get()) == 1);
  client_context.set_verify_mode(ssl::verify_peer);
  client_context.set_verify_callback(ssl::host_name_verification("coverbs-test"));

  connected_pair p(kind);
  ssl::stream<socket&> client(p.a, client_context), server(p.b, server_context);
  BOOST_TEST(&client.lowest_layer() == &p.a);
  std::vector<unsigned char> sent(256 * 1024), echoed(sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<unsigned char>(i * 131 + i / 977);
  const auto server_side = [&]() -> asio::awaitable<void> {
    co_await server.async_handshake(ssl::stream_base::server, asio::use_awaitable);
    std::vector<unsigned char> got(sent.size());
    co_await asio::async_read(server, asio::buffer(got), asio::use_awaitable);
    co_await asio::async_write(server, asio::buffer(got), asio::use_awaitable);
    co_await server.async_shutdown(asio::use_awaitable);
  };
  const auto client_side = [&]() -> asio::awaitable<void> {
    co_await client.async_handshake(ssl::stream_base::client, asio::use_awaitable);
    co_await asio::async_write(client, asio::buffer(sent), asio::use_awaitable);
    co_await asio::async_read(client, asio::buffer(echoed), asio::use_awaitable);
    co_await client.async_shutdown(asio::use_awaitable);
  };
  BOOST_REQUIRE(p.run_both(server_side(), client_side()));
  BOOST_TEST((echoed == sent));
}

/// A handshake the client must refuse, `trusted` being the certificate it trusts and `name`
/// the host name it expects: it fails with OpenSSL's "certificate verify failed", not a hang,
/// and the server's handshake ends too once the client gives up.
inline void tls_handshake_refused(transport kind, bool trust_other, const char* name) {
  namespace asio = boost::asio;
  namespace ssl = asio::ssl;
  throwaway_certificate identity("coverbs-test"), other("someone-else");
  ssl::context server_context(ssl::context::tls_server), client_context(ssl::context::tls_client);
  BOOST_REQUIRE(SSL_CTX_use_certificate(server_context.native_handle(), identity.cert.get()) == 1);
  BOOST_REQUIRE(SSL_CTX_use_PrivateKey(server_context.native_handle(), identity.key.get()) == 1);
  X509* trusted = trust_other ? other.cert.get() : identity.cert.get();
  BOOST_REQUIRE(X509_STORE_add_cert(SSL_CTX_get_cert_store(client_context.native_handle()), trusted) == 1);
  client_context.set_verify_mode(ssl::verify_peer);
  client_context.set_verify_callback(ssl::host_name_verification(name));

  connected_pair p(kind);
  ssl::stream<socket&> client(p.a, client_context), server(p.b, server_context);
  std::optional<error_code> client_result, server_result;
  server.async_handshake(ssl::stream_base::server, [&](error_code ec) { server_result = ec; });
  client.async_handshake(ssl::stream_base::client, [&](error_code ec) {
    client_result = ec;
    p.a.close();  // as a client gives up: the server's handshake ends too
  });
  p.io.restart();
  while (!(client_result && server_result) && p.io.run_one_for(std::chrono::seconds(30)) > 0) {
  }
  BOOST_REQUIRE(client_result.has_value());
  BOOST_TEST((client_result->category() == asio::error::get_ssl_category()), client_result->message());
  BOOST_TEST(
      ERR_GET_REASON(static_cast<unsigned long>(client_result->value())) == SSL_R_CERTIFICATE_VERIFY_FAILED,
      client_result->message());
  BOOST_REQUIRE(server_result.has_value());
  BOOST_TEST(server_result->failed());
}

/// The client trusts another certificate; then the right one, but under another name.
void tls_wrong_certificate_fails(transport kind) {
  tls_handshake_refused(kind, true, "coverbs-test");
  tls_handshake_refused(kind, false, "someone-else");
}

}  // namespace coverbs::test
