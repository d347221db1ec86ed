//! The runtime for tests, for the top-level tests that drive the `dsh` binary and still use it
//! (`on_timeout`, `retention`, `watchdog_restarts`); it lives in `dsh-test-support`.

#[allow(unused_imports)] // Not every test file uses every helper.
pub use dsh_test_support::runtime::*;
