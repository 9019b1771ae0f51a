// SHA-256 through OpenSSL's EVP interface, computed as the bytes pass by.
#pragma once

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace ft {

class sha256 {
 public:
  sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) {
      throw std::runtime_error("cannot set up SHA-256 (OpenSSL)");
    }
  }
  void update(std::span<const std::byte> bytes) {
    if (EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) != 1)
      throw std::runtime_error("SHA-256 failed");
  }
  std::array<std::uint8_t, 32> finish() {
    std::array<std::uint8_t, 32> out{};
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), out.data(), &n) != 1 || n != out.size()) {
      throw std::runtime_error("SHA-256 failed");
    }
    return out;
  }

 private:
  struct free_ctx {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, free_ctx> ctx_;
};

/// Lower-case hex, as sha256sum prints it.
inline std::string hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (auto b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

}  // namespace ft
