//! The J1939 adapter against real captures: the candump logs of `tests/data/j1939/`
//! (made by `peers/make_j1939_logs.py` through the can-j1939 stack, and one written by
//! hand in the can-utils format), replayed through [`Adapters`] as a host does.
//!
//! Every wait is bounded in events and in time; nothing asserts how fast anything is
//! (the replay is only checked never to run ahead of the recorded pace).

use std::time::Duration;

use grid_adapters::j1939::Pace;
use grid_adapters::{Adapters, Completion, Connection, Credentials, Event, Quality, Raw, Reading};
use grid_spec::{J1939Input, Origin, Tag, TagSource};
use tokio::sync::mpsc;

/// How long one replay may take before the test fails (the longest paced one is 2.5 s).
const REPLAY_WAIT: Duration = Duration::from_secs(60);
/// The first frame of every fixture, Unix ms.
const T0: u64 = 1_700_000_000_000;

fn log(name: &str) -> String {
    format!("{}/tests/data/j1939/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn tag(input: J1939Input, pgn: u32, spn: u32, source_address: Option<u8>) -> Tag {
    Tag {
        name: "engine".to_owned(),
        host: "h".to_owned(),
        source: TagSource::J1939 {
            input,
            pgn,
            spn,
            source_address,
        },
        retired: false,
        origin: Origin {
            source: 0,
            offset: 0,
            length: 0,
        },
    }
}

fn log_tag(name: &str, pgn: u32, spn: u32, source_address: Option<u8>) -> Tag {
    tag(J1939Input::Log(log(name)), pgn, spn, source_address)
}

/// Runs `tag` through a host's adapters until its log has ended (or it was refused)
/// and returns every event it reported, in order.
fn run(tag: &Tag, resume: Option<u64>, pace: Pace) -> Vec<Event> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (sink, mut events) = mpsc::channel(64);
    let mut adapters = Adapters::new(runtime.handle().clone(), sink, "h", Credentials::default());
    adapters.set_j1939_pace(pace);
    adapters.start_after(tag, 7, resume).expect("starts");
    let mut out = Vec::new();
    runtime.block_on(async {
        let deadline = tokio::time::Instant::now() + REPLAY_WAIT;
        loop {
            let event = tokio::time::timeout_at(deadline, events.recv())
                .await
                .unwrap_or_else(|_| panic!("no end of the replay within {REPLAY_WAIT:?}: {out:?}"))
                .expect("the adapter keeps the sink");
            assert_eq!((event.tag.as_str(), event.generation), ("engine", 7));
            let end = matches!(&event.event, Event::Connection(c) if c.state == "ended" || c.state == "refused");
            out.push(event.event);
            if end {
                break;
            }
        }
    });
    adapters.stop("engine");
    // Nothing more after the end.
    assert!(events.try_recv().is_err());
    out
}

fn readings(events: &[Event]) -> Vec<&Reading> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Reading(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// Each reading as (device ms after T0, value or debt reason).
fn values(events: &[Event]) -> Vec<(u64, String)> {
    readings(events)
        .into_iter()
        .map(|r| {
            let at = r.device_time_ms.expect("a capture time") - T0;
            let what = match &r.quality {
                Quality::Good { value } => format!("{value}"),
                Quality::Debt { reason } => reason.clone(),
                Quality::Refused { reason } => format!("refused: {reason}"),
            };
            (at, what)
        })
        .collect()
}

fn pairs(expected: &[(u64, &str)]) -> Vec<(u64, String)> {
    expected
        .iter()
        .map(|(t, v)| (*t, (*v).to_owned()))
        .collect()
}

#[test]
fn replayed_single_frames_decode_with_not_available_and_error_as_debt() {
    let events = run(
        &log_tag("single-frames.log", 61444, 190, None),
        None,
        Pace::Recorded,
    );
    assert!(
        matches!(&events[0], Event::Connection(Connection { state, .. }) if state == "replaying")
    );
    assert_eq!(
        values(&events),
        pairs(&[
            (0, "1500"),
            (700, "not available"),
            (800, "error indicator"),
            (900, "1600"),
            (1000, "1700"),
        ])
    );
    let raw: Vec<&Raw> = readings(&events).iter().map(|r| &r.raw).collect();
    assert_eq!(raw[0], &Raw::UInt(12_000));
    assert_eq!(raw[1], &Raw::UInt(0xFF00));
    match events.last() {
        Some(Event::Connection(Connection { state, detail })) => {
            assert_eq!(state, "ended");
            assert_eq!(
                detail.as_deref(),
                Some("11 frames replayed, 0 malformed lines skipped")
            );
        }
        other => panic!("{other:?}"),
    }

    // The source-address filter drops source 1's 1600 rpm.
    let events = run(
        &log_tag("single-frames.log", 61444, 190, Some(0)),
        None,
        Pace::Unpaced,
    );
    let at: Vec<u64> = values(&events).into_iter().map(|(t, _)| t).collect();
    assert_eq!(at, vec![0, 700, 800, 1000]);

    // Every other SPN of the table, each from its PGN.
    for (pgn, spn, at, value) in [
        (65262, 110, 100, "85"),
        (65262, 175, 100, "97"),
        (65265, 84, 200, "80"),
        (65276, 96, 300, "80"),
        (65263, 100, 400, "400"),
        (65253, 247, 500, "10000"),
        (61443, 91, 600, "50"),
    ] {
        let events = run(
            &log_tag("single-frames.log", pgn, spn, None),
            None,
            Pace::Unpaced,
        );
        assert_eq!(values(&events), pairs(&[(at, value)]), "SPN {spn}");
    }
}

#[test]
fn a_bam_is_reassembled_and_its_completion_precedes_its_reading_and_a_broken_one_is_debt() {
    let events = run(
        &log_tag("bam.log", 65251, 188, Some(0)),
        None,
        Pace::Recorded,
    );
    let mut ec1 = vec![0xFF; 39];
    ec1[..3].copy_from_slice(&[0x00, 0x19, 135]);
    let completion = events
        .iter()
        .position(|e| matches!(e, Event::Completion(_)));
    let Some(i) = completion else {
        panic!("no completion: {events:?}")
    };
    match &events[i] {
        Event::Completion(Completion {
            pgn,
            source_address,
            bytes,
            packets,
            device_time_ms,
            ..
        }) => {
            assert_eq!((*pgn, *source_address, *packets), (65251, 0, 6));
            assert_eq!(bytes, &ec1);
            assert_eq!(*device_time_ms, Some(T0 + 400));
        }
        other => panic!("{other:?}"),
    }
    // The reading decoded from it comes right after, at the same capture time.
    assert!(
        matches!(&events[i + 1], Event::Reading(r) if r.quality == Quality::Good { value: 800.0 } && r.device_time_ms == Some(T0 + 400)),
        "{events:?}"
    );
    assert_eq!(
        values(&events),
        pairs(&[
            (400, "800"),
            (
                2500,
                "multi-packet message incomplete: packet 4 of 6 did not arrive within 750 ms"
            ),
        ])
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Completion(_)))
            .count(),
        1
    );

    // SPN 539 of the same message; and a tag of another source sees nothing of it.
    let events = run(&log_tag("bam.log", 65251, 539, None), None, Pace::Unpaced);
    assert_eq!(values(&events)[0], (400, "10".to_owned()));
    let events = run(
        &log_tag("bam.log", 65251, 188, Some(9)),
        None,
        Pace::Unpaced,
    );
    assert!(values(&events).is_empty(), "{events:?}");
    assert!(!events.iter().any(|e| matches!(e, Event::Completion(_))));
}

#[test]
fn the_replay_keeps_the_recorded_order_and_never_runs_ahead_of_its_pace() {
    let events = run(
        &log_tag("single-frames.log", 61444, 190, None),
        None,
        Pace::Recorded,
    );
    let readings = readings(&events);
    for pair in readings.windows(2) {
        assert!(pair[0].device_time_ms < pair[1].device_time_ms, "{pair:?}");
        assert!(pair[0].received_ms <= pair[1].received_ms, "{pair:?}");
    }
    // The last reading was captured 1,000 ms after the first: it is not received
    // sooner than that after it (a lower bound only; how much later is not asserted).
    let (first, last) = (readings[0], readings[readings.len() - 1]);
    let recorded = last.device_time_ms.unwrap() - first.device_time_ms.unwrap();
    assert_eq!(recorded, 1_000);
    assert!(
        last.received_ms - first.received_ms >= recorded - 1,
        "{readings:?}"
    );
}

#[test]
fn a_resumed_replay_skips_every_frame_at_or_before_the_resume_point() {
    let all = values(&run(
        &log_tag("single-frames.log", 61444, 190, None),
        None,
        Pace::Unpaced,
    ));
    let resumed = values(&run(
        &log_tag("single-frames.log", 61444, 190, None),
        Some(T0 + 800),
        Pace::Recorded,
    ));
    assert_eq!(resumed, all[3..].to_vec());
    assert_eq!(resumed, pairs(&[(900, "1600"), (1000, "1700")]));

    // Resuming inside a BAM still reassembles it from its earlier packets: the
    // completion (after the resume point) is reported, nothing before it.
    let events = run(
        &log_tag("bam.log", 65251, 188, Some(0)),
        Some(T0 + 200),
        Pace::Unpaced,
    );
    assert!(
        matches!(&events[1], Event::Completion(c) if c.device_time_ms == Some(T0 + 400)),
        "{events:?}"
    );
    assert_eq!(values(&events).len(), 2);
    // Resuming after the completion: only the broken message's debt is left.
    let events = run(
        &log_tag("bam.log", 65251, 188, Some(0)),
        Some(T0 + 400),
        Pace::Unpaced,
    );
    assert!(!events.iter().any(|e| matches!(e, Event::Completion(_))));
    assert_eq!(values(&events).len(), 1);
    // Resuming at the end: nothing but the connection's states.
    let events = run(
        &log_tag("bam.log", 65251, 188, Some(0)),
        Some(T0 + 2500),
        Pace::Unpaced,
    );
    assert!(values(&events).is_empty(), "{events:?}");
}

#[test]
fn a_hand_written_candump_l_log_replays_skipping_what_is_not_j1939() {
    let events = run(
        &log_tag("candump-l.log", 65262, 110, None),
        None,
        Pace::Unpaced,
    );
    assert_eq!(
        values(&events),
        pairs(&[
            (0, "85"),
            (1000, "40"),
            (1000, "error indicator"),
            (2000, "not available"),
            (2500, "100"),
        ])
    );
    let events = run(
        &log_tag("candump-l.log", 65262, 110, Some(0)),
        None,
        Pace::Unpaced,
    );
    assert_eq!(values(&events).len(), 4);
}

#[test]
fn the_journey_log_replays_unpaced_with_its_sensor_dropout_as_debt() {
    let events = run(
        &log_tag("journey-engine.log", 61444, 190, Some(0)),
        None,
        Pace::Unpaced,
    );
    let values = values(&events);
    assert_eq!(values.len(), 120);
    assert_eq!(values[0], (0, "900".to_owned()));
    assert_eq!(values[119], (29_750, "2090".to_owned()));
    let debt: Vec<u64> = values
        .iter()
        .filter(|(_, v)| v == "not available")
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(debt, (0..12).map(|i| 5_000 + i * 250).collect::<Vec<_>>());
}

#[test]
fn an_interface_is_refused_on_a_kernel_without_can_and_a_missing_log_before_capture() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (sink, _events) = mpsc::channel(8);
    let adapters = Adapters::new(runtime.handle().clone(), sink, "h", Credentials::default());
    let can0 = tag(J1939Input::Interface("can0".to_owned()), 61444, 190, None);
    let can_here = std::fs::read_to_string("/proc/net/protocols")
        .is_ok_and(|p| p.lines().any(|l| l.starts_with("CAN")));
    let refusal = adapters.check(&can0).expect_err("no can0 here").to_string();
    if can_here {
        assert!(refusal.contains("no CAN interface `can0`"), "{refusal}");
    } else {
        assert!(
            refusal.contains("no CAN support in this kernel: "),
            "{refusal}"
        );
    }
    let missing = log_tag("no-such.log", 61444, 190, None);
    let refusal = adapters
        .check(&missing)
        .expect_err("no such log")
        .to_string();
    assert!(refusal.contains("cannot open the candump log"), "{refusal}");
    assert!(
        adapters
            .check(&log_tag("bam.log", 65251, 188, None))
            .is_ok()
    );

    // Started anyway (a host restarting with it installed): one refused reading, then
    // the refused connection, nothing more.
    let events = run(&can0, None, Pace::Recorded);
    assert_eq!(events.len(), 2, "{events:?}");
    let Event::Reading(Reading {
        quality: Quality::Refused { reason },
        raw: Raw::None,
        ..
    }) = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(
        &events[1],
        &Event::Connection(Connection {
            state: "refused".to_owned(),
            detail: Some(reason.clone())
        })
    );
    if !can_here {
        assert!(
            reason.starts_with("no CAN support in this kernel: "),
            "{reason}"
        );
    }
}

#[test]
fn a_stopped_replay_reports_nothing_more_and_a_malformed_line_is_skipped_and_counted() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (sink, mut events) = mpsc::channel(64);
    let mut adapters = Adapters::new(runtime.handle().clone(), sink, "h", Credentials::default());
    // The journey's capture lasts 30 s at its recorded pace: stopped after its first
    // readings, its task ends and drops its sink without reporting the end.
    let tag = log_tag("journey-engine.log", 61444, 190, Some(0));
    adapters.start_after(&tag, 7, None).expect("starts");
    let mut seen = Vec::new();
    runtime.block_on(async {
        while readings(&seen).len() < 2 {
            let event = tokio::time::timeout(REPLAY_WAIT, events.recv())
                .await
                .expect("readings within the wait")
                .expect("the adapter keeps the sink");
            seen.push(event.event);
        }
    });
    adapters.stop("engine");
    drop(adapters);
    runtime.block_on(async {
        // Every sender is gone once the task has ended: what was queued, then None.
        while let Some(event) = tokio::time::timeout(REPLAY_WAIT, events.recv())
            .await
            .expect("the stopped task ends")
        {
            seen.push(event.event);
        }
    });
    assert!(readings(&seen).len() < 120, "{seen:?}");
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, Event::Connection(c) if c.state == "ended"))
    );

    // A line that is no candump record is skipped, counted, and the replay goes on.
    let dir = std::env::temp_dir().join(format!("grid-j1939-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("malformed.log");
    std::fs::write(
        &path,
        "(1700000000.000000) can0 18FEEE00#7DFF402EFFFFFFFF\n\
         not a candump line\n\
         (1700000000.5) can0 18FEEE00#7DFF402EFFFFFFFF\n\
         (1700000001.000000) can0 18FEEE00#8CFF402EFFFFFFFF\n",
    )
    .unwrap();
    let events = run(&tag_at(&path, 65262, 110), None, Pace::Unpaced);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(values(&events), pairs(&[(0, "85"), (1000, "100")]));
    assert!(
        matches!(events.last(), Some(Event::Connection(Connection { state, detail: Some(d) })) if state == "ended" && d == "2 frames replayed, 2 malformed lines skipped"),
        "{events:?}"
    );
}

fn tag_at(path: &std::path::Path, pgn: u32, spn: u32) -> Tag {
    tag(J1939Input::Log(path.display().to_string()), pgn, spn, None)
}
