//! How `weir bench` ends: what it prints (human text or one JSON value) and its exit
//! status. The statuses are the `weir` command's own (0 done, 1 error, 2 usage); the bench
//! never refuses, so it has no status 3. The `weir` crate checks that its constants and
//! these agree.

/// Exit status: done.
pub const EXIT_OK: i32 = 0;
/// Exit status: an error (unreachable, internal), or a run whose verification failed.
pub const EXIT_ERROR: i32 = 1;
/// Exit status: bad usage.
pub const EXIT_USAGE: i32 = 2;

/// What the bench ends with: the exit status, and what was printed is already printed.
pub type Exit = i32;

/// Where results go: human text or one JSON value.
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON, or `text` for people.
    pub fn print(&self, value: serde_json::Value, text: impl FnOnce() -> String) {
        if self.json {
            println!("{value}");
        } else {
            println!("{}", text());
        }
    }
}
