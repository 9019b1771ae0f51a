#define BOOST_TEST_MODULE coverbs
#include <boost/test/unit_test.hpp>
