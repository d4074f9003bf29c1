//! The coordination authority (SPEC C3). Today: its claims state machine and the
//! fencing rule (`claims`), pure logic that the openraft-based `authority` profile
//! (issue 5) will drive; the profile itself still refuses to start.

pub mod claims;
