# Shared by the build and by the installed package config, so a consumer's
# find_package(coverbs) resolves the same system libraries the library was built with.
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED CONFIG COMPONENTS headers)
find_package(PkgConfig REQUIRED)
pkg_check_modules(coverbs_ibverbs REQUIRED IMPORTED_TARGET GLOBAL libibverbs)
pkg_check_modules(coverbs_rdmacm REQUIRED IMPORTED_TARGET GLOBAL librdmacm)
pkg_check_modules(coverbs_uring REQUIRED IMPORTED_TARGET GLOBAL liburing)
