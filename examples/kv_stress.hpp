// kv_client's stress mode: writers PUT self-checking values (kv_checked_value.hpp) while
// readers GET the same keys one-sided, each over its own connection. Every GET must return a
// value some writer of this run PUT for that key, or not-found while no PUT of the key has
// been acknowledged yet. Anything else is counted as torn (checksum wrong) or wrong.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv_checked_value.hpp"
#include "kv_connection.hpp"

namespace kv {

struct stress_options {
  std::size_t writers = 2, readers = 2, keys = 8, value_size = 256;
  std::chrono::milliseconds duration{3000};
  one_sided_options get;
};

struct stress_result {
  std::size_t puts = 0, gets = 0, found = 0, not_found = 0, torn = 0, wrong = 0;
  get_stats stats;
  std::string first_problem;
};

class stress {
 public:
  stress(const boost::asio::any_io_executor& ex, coverbs::transport kind, const stress_options& o,
         activity& progress)
      : ex_(ex), opt_(o), progress_(progress), issued_(o.writers), acked_(o.keys), done_(ex) {
    for (std::size_t i = 0; i < o.writers + o.readers; ++i) {
      connections_.push_back(std::make_unique<connection>(ex, kind));
    }
    run_id_ = std::random_device()() * 0x100000001ull ^ std::random_device()();
  }

  boost::asio::awaitable<stress_result> run(const std::vector<boost::asio::ip::tcp::endpoint>& servers) {
    for (auto& c : connections_) {
      co_await c->connect(servers);
      progress_.transport = c->socket().transport_in_use();
      ++progress_.operations;
    }
    progress_.connected = true;
    if (opt_.value_size > connections_[0]->table().max_value) {
      throw std::runtime_error("--value-size exceeds the server's limit of " +
                               std::to_string(connections_[0]->table().max_value) + " bytes");
    }
    // Values of earlier runs must not count as this run's.
    for (std::size_t k = 0; k < opt_.keys; ++k) {
      const auto name = key(k);
      co_await connections_[0]->del(name);
      ++progress_.operations;  // the watchdog waits for progress, and many keys take a while
    }
    deadline_ = std::chrono::steady_clock::now() + opt_.duration;
    running_ = connections_.size();
    done_.expires_at(std::chrono::steady_clock::time_point::max());
    for (std::size_t i = 0; i < connections_.size(); ++i) {
      auto task = i < opt_.writers ? writer(i) : reader(i);
      boost::asio::co_spawn(ex_, std::move(task), [this](std::exception_ptr e) {
        if (e && !failure_) failure_ = e;
        if (--running_ == 0) done_.cancel();
      });
    }
    co_await done_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (failure_) std::rethrow_exception(failure_);
    co_return result_;
  }

  std::size_t connections() const noexcept { return connections_.size(); }
  coverbs::transport transport_in_use() const { return connections_.front()->socket().transport_in_use(); }

 private:
  static std::string key(std::size_t k) { return "stress-" + std::to_string(k); }
  bool running() const { return !failure_ && std::chrono::steady_clock::now() < deadline_; }

  boost::asio::awaitable<void> writer(std::size_t w) {
    connection& c = *connections_[w];
    std::minstd_rand pick(static_cast<unsigned>(w + 1));
    for (std::uint64_t sequence = 1; running(); ++sequence) {
      const auto k = static_cast<std::uint32_t>(pick() % opt_.keys);
      const auto v =
          make_checked_value({run_id_, k, static_cast<std::uint32_t>(w), sequence}, opt_.value_size);
      issued_[w] = sequence;  // from now on a reader may see it
      const auto name = key(k);
      if (co_await c.put(name, v) != status::ok)
        throw std::runtime_error(std::string("a PUT found the table full: ") + connection::table_full_advice);
      acked_[k] = true;
      ++result_.puts;
      ++progress_.operations;
    }
  }

  boost::asio::awaitable<void> reader(std::size_t r) {
    connection& c = *connections_[r];
    std::minstd_rand pick(static_cast<unsigned>(r + 1000));
    while (running()) {
      const auto k = static_cast<std::uint32_t>(pick() % opt_.keys);
      const bool put_before = acked_[k];
      const auto name = key(k);
      const auto v = co_await c.get_one_sided(name, result_.stats, opt_.get);
      ++result_.gets;
      ++progress_.operations;
      if (!v) {
        ++result_.not_found;
        if (put_before) problem(result_.wrong, name + ": not found after a PUT of it was acknowledged");
        continue;
      }
      ++result_.found;
      const auto s = read_checked_value(*v);
      if (!s) {
        problem(result_.torn, name + ": torn value (checksum wrong)");
      } else if (s->run != run_id_ || s->key != k || s->writer >= opt_.writers || s->sequence == 0 ||
                 s->sequence > issued_[s->writer]) {
        problem(result_.wrong, name + ": intact value that no PUT of this run wrote for it");
      }
    }
  }

  void problem(std::size_t& counter, const std::string& what) {
    ++counter;
    if (result_.first_problem.empty()) result_.first_problem = what;
  }

  boost::asio::any_io_executor ex_;
  stress_options opt_;
  activity& progress_;
  std::vector<std::unique_ptr<connection>> connections_;
  std::vector<std::uint64_t> issued_;  // per writer: the last sequence number it started to PUT
  std::vector<bool> acked_;            // per key: a PUT of it was acknowledged
  std::uint64_t run_id_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::size_t running_ = 0;
  boost::asio::steady_timer done_;
  std::exception_ptr failure_;
  stress_result result_;
};

}  // namespace kv
