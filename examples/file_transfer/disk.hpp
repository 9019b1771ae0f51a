// The files' own event loop, on a thread of its own. io_uring reads and writes cached data
// (a tmpfs file, pages already in memory) inside the io_uring_enter that submits them, and Asio
// submits from the thread that runs the file's io_context: with the files on the connection's
// context, each 1 MiB slot was copied on the connection's thread (2.8 ms in the test bed VM,
// against 25 ms for the post of the RDMA WRITE that sends it, which does Soft-RoCE's packet
// work in that thread), one after the other. Completions still run on the connection's
// thread: the handlers that have no executor of their own are bound to it, and a coroutine
// resumes on its own.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <thread>

namespace ft {

namespace asio = boost::asio;

class disk {
 public:
  disk() : thread_([this] { io_.run(); }) {}
  /// Lets the thread finish the operations under way, then joins it: destroy the files first.
  ~disk() {
    work_.reset();
    thread_.join();
  }
  disk(const disk&) = delete;
  disk& operator=(const disk&) = delete;

  /// Where files are opened.
  asio::any_io_executor executor() { return io_.get_executor(); }

 private:
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::thread thread_;  // last: starts once the context and the work guard are there
};

}  // namespace ft
