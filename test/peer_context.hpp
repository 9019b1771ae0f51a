// Where a test's socket pair runs its second socket (b): on the first one's io_context, or on
// an io_context of its own that the test runs on another thread, so that b's writes go on
// however long a handler on a's context takes.
#pragma once

namespace coverbs::test {

enum class peer_context { shared, own };

}  // namespace coverbs::test
