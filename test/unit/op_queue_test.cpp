#include <boost/test/unit_test.hpp>

#include "coverbs/detail/operation.hpp"

using coverbs::detail::op_queue;
using coverbs::detail::operation;

BOOST_AUTO_TEST_SUITE(intrusive_op_queue)

BOOST_AUTO_TEST_CASE(is_fifo_and_erases_anywhere) {
  operation a(nullptr), b(nullptr), c(nullptr), d(nullptr);
  op_queue q;
  BOOST_TEST(q.empty());
  q.push(&a);
  q.push(&b);
  q.push(&c);
  BOOST_TEST(q.erase(&b));
  BOOST_TEST(!q.erase(&d));
  BOOST_TEST(q.erase(&c));  // the tail: a later push must still link after a
  q.push(&d);
  BOOST_TEST(q.pop() == &a);
  BOOST_TEST(q.pop() == &d);
  BOOST_TEST(q.pop() == nullptr);
  BOOST_TEST(q.empty());
}

BOOST_AUTO_TEST_SUITE_END()
