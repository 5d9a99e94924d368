//! Time stamps of rows, and the clock a ledger reads them from (injectable,
//! so that tests are deterministic).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The epoch itself.
    pub const EPOCH: Self = Self(0);
    /// The latest representable time: `prune_finished(Timestamp::MAX)` prunes
    /// every finished run.
    pub const MAX: Self = Self(i64::MAX as u64);

    /// A time stamp `millis` milliseconds after the epoch (capped at
    /// [`Timestamp::MAX`], so that every stamp fits a signed 64-bit column).
    pub fn from_millis(millis: u64) -> Self {
        Self(millis.min(Self::MAX.0))
    }

    /// Milliseconds since the epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// The wall-clock time now.
    pub fn now() -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self::from_millis(millis)
    }

    /// This time minus `age`, saturating at the epoch: the cut-off for a
    /// retention of `age`.
    pub fn minus(self, age: Duration) -> Self {
        let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        Self(self.0.saturating_sub(age))
    }

    /// `YYYY-MM-DD HH:MM:SS`, UTC, to the second: how a person reads it.
    pub fn utc(self) -> String {
        let secs = self.0 / 1000;
        let days = i64::try_from(secs / 86_400).unwrap_or(0);
        let rest = secs % 86_400;
        // Civil from days (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
            rest / 3600,
            rest % 3600 / 60,
            rest % 60
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Where a ledger reads the time it stamps rows with.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The time now.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to, for deterministic tests.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(Arc::new(AtomicU64::new(start.as_millis())))
    }

    /// Sets the time.
    pub fn set(&self, to: Timestamp) {
        self.0.store(to.as_millis(), Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.load(Ordering::SeqCst))
    }
}

/// A shared clock.
pub type SharedClock = Arc<dyn Clock>;

/// The default clock: the wall clock.
pub(crate) fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}
