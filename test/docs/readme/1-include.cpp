// README.md's C++ blocks, each put into a template that supplies what the fragment leaves out
// (test/docs/readme_snippets.sh). Block 1: the include.
// @README@
