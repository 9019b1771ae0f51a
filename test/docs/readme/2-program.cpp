// Block 2: a whole program (compiled without the tests' precompiled header, so that its
// includes are its own).
// @README@
