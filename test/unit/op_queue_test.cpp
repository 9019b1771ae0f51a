#include <boost/test/unit_test.hpp>

#include "coverbs/detail/operation.hpp"

using coverbs::detail::op_list;
using coverbs::detail::op_queue;
using coverbs::detail::operation;

BOOST_AUTO_TEST_SUITE(intrusive_op_queue)

BOOST_AUTO_TEST_CASE(is_fifo_and_erases_anywhere) {
  operation a(nullptr, nullptr), b(nullptr, nullptr), c(nullptr, nullptr), d(nullptr, nullptr);
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

// Posted requests leave their list in whatever order they complete.
BOOST_AUTO_TEST_CASE(list_erases_anywhere_in_constant_time) {
  operation a(nullptr, nullptr), b(nullptr, nullptr), c(nullptr, nullptr), d(nullptr, nullptr);
  op_list l;
  BOOST_TEST(l.pop() == nullptr);
  l.push(&a);
  l.push(&b);
  l.push(&c);
  l.erase(&b);  // the middle
  l.erase(&c);  // the tail: a later push must still link after a
  l.push(&d);
  l.erase(&a);  // the head
  l.push(&b);
  BOOST_TEST(l.pop() == &d);
  BOOST_TEST(l.pop() == &b);
  BOOST_TEST(l.pop() == nullptr);
}

BOOST_AUTO_TEST_SUITE_END()
