// Nothing of its own: the target built from this file makes the precompiled header that every
// test reuses (test/CMakeLists.txt, coverbs_test_pch).
