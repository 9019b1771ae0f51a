# COVERBS_SANITIZE: build this tree under sanitizers, e.g. "address,undefined" or "thread".
# CI runs the library's test suite this way (scripts/test, docs/reliability.md).
set(COVERBS_SANITIZE "" CACHE STRING "Sanitizers to build with: address,undefined | thread | empty for none")
if(NOT COVERBS_SANITIZE)
  return()
endif()
if(COVERBS_SANITIZE MATCHES "thread" AND COVERBS_SANITIZE MATCHES "address")
  message(FATAL_ERROR "COVERBS_SANITIZE: thread cannot be combined with address")
endif()

# Every finding stops the test that made it: a report that scrolls past in a passing run
# would be missed. UBSan instruments the library's own code (src/, through
# COVERBS_SANITIZE_LIBRARY_OPTIONS), the other sanitizers everything. UBSan on every test file
# would double the build (measured on tcp_fault_test.cpp: 89 s at -O1 with it, 38 s without,
# 30 s for the plain -O2 build), and at -O0 instead the tests' byte-checking loops ran for
# minutes in the emulated VM. Everything is built at -O1, asserts on.
string(REPLACE "," ";" coverbs_sanitizers "${COVERBS_SANITIZE}")
set(coverbs_everywhere ${coverbs_sanitizers})
list(REMOVE_ITEM coverbs_everywhere undefined)
set(coverbs_common -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1 -UNDEBUG)
if(coverbs_everywhere)
  list(JOIN coverbs_everywhere "," coverbs_everywhere)
  add_compile_options(-fsanitize=${coverbs_everywhere})
endif()
add_compile_options(${coverbs_common})
add_link_options(-fsanitize=${COVERBS_SANITIZE})
set(COVERBS_SANITIZE_LIBRARY_OPTIONS -fsanitize=${COVERBS_SANITIZE})
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # The instrumentation makes g++ report uninitialized use that is not there (in Asio's
  # use_future, for an empty allocator); the plain build keeps this warning as an error.
  add_compile_options(-Wno-maybe-uninitialized)
  # Tracking where each local lives through -O1's transformations took a fifth of the compile
  # time (websocket_tests.cpp: 104 s with it, 82 s without); the reports' stacks need the
  # line tables and the records of what was inlined where, which stay.
  add_compile_options(-fno-var-tracking)
  if(COVERBS_SANITIZE MATCHES "thread")
    # TSan does not model the fences in Asio's fenced blocks; the scheduler's mutex, which it
    # does model, already orders a handler after whatever queued it.
    add_compile_options(-Wno-tsan)
  endif()
endif()

# An installed sanitized library needs its runtime in whatever links it.
list(TRANSFORM coverbs_sanitizers PREPEND "-fsanitize=")
set(COVERBS_INSTALL_LINK_OPTIONS ${coverbs_sanitizers})
