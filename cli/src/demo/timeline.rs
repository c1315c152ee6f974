//! The demo's readable timeline: milliseconds since the start, who, what.

use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

/// Prints events as they happen (text mode) and keeps them for the JSON summary.
pub struct Timeline {
    start: Instant,
    print: bool,
    events: Mutex<Vec<Value>>,
}

impl Timeline {
    /// A timeline starting now; `print` = text mode.
    pub fn new(print: bool) -> Timeline {
        Timeline { start: Instant::now(), print, events: Mutex::new(Vec::new()) }
    }

    /// Records (and in text mode prints) one event.
    pub fn log(&self, who: &str, what: impl Into<String>) {
        let what = what.into();
        let ms = self.start.elapsed().as_millis() as u64;
        if self.print {
            println!("  +{ms:>5} ms  {who:<9} {what}");
        }
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(json!({ "t_ms": ms, "worker": who, "event": what }));
    }

    /// Prints a line outside the timeline (text mode only).
    pub fn say(&self, text: impl AsRef<str>) {
        if self.print {
            println!("{}", text.as_ref());
        }
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}
