//! Processes read through a host's control socket, for the benchmarks that run them
//! (`process_compare`, `mission_compare`, `key_rotation`, `control_render`): a served
//! connection, one call, what a receiver holds, and runs retained in bulk.

use std::collections::BTreeMap;
use std::path::Path;

use grid_engine::host::control::Client;
use grid_engine::processes::api::{
    GrantView, Peer, ProcessCall, ProcessReply, RunCounts, RunOutcome, RunRequest,
};
use grid_engine::protocol::{Call, Reply};

use crate::bringup::connect_served;
use crate::procs::Result;

/// A control connection to the host at `host_dir` that it serves (a host over
/// `CONTROL_CONNECTIONS_MAX` answers the first call with a refusal), checked with a
/// call that changes nothing.
pub fn connect(host_dir: &Path) -> Result<Client> {
    let probe = Call::Process {
        request: ProcessCall::Processes,
    };
    connect_served(host_dir, &probe, |reply| matches!(reply, Reply::Process(_)))
}

/// One `Call::Process` over `client`: its reply, or what came instead.
pub fn process(
    client: &mut Client,
    request: ProcessCall,
) -> std::result::Result<ProcessReply, String> {
    match client.call(&Call::Process { request }) {
        Ok(Reply::Process(reply)) => Ok(*reply),
        Ok(other) => Err(format!("{other:?}")),
        Err(e) => Err(format!("call error: {e}")),
    }
}

/// What one host holds as a receiver: its runs by outcome, its `demo.count` counter,
/// and the grant it issued by that name, if any.
pub struct ReceiverTotals {
    pub runs: RunCounts,
    pub demo_count: u64,
    pub grant: Option<GrantView>,
}

/// What the host at `host_dir` (named `host` in errors) holds as a receiver, with the
/// grant `grant`.
pub fn receiver_totals(host_dir: &Path, host: &str, grant: &str) -> Result<ReceiverTotals> {
    let mut client = Client::connect(host_dir)?;
    let (runs, demo_count) = match process(&mut client, ProcessCall::Processes)? {
        ProcessReply::Processes {
            runs, demo_count, ..
        } => (runs, demo_count),
        other => return Err(format!("processes at {host}: {other:?}").into()),
    };
    let grant = match process(&mut client, ProcessCall::Grants)? {
        ProcessReply::Grants { grants, .. } => grants.into_iter().find(|g| g.name == grant),
        other => return Err(format!("grants at {host}: {other:?}").into()),
    };
    Ok(ReceiverTotals {
        runs,
        demo_count,
        grant,
    })
}

/// Callers running the retained runs of [`retain_runs`] at once.
const CALLERS: usize = 16;
/// How long one of those runs may wait for its outcome.
const WAIT_MS: u64 = 30_000;

/// `runs` runs of `demo.count` at `receiver`, called by the host at `caller`, from
/// [`CALLERS`] connections at once; each must succeed.
pub fn retain_runs(caller: &Path, receiver: &Peer, runs: usize) -> Result<()> {
    let per = runs.div_ceil(CALLERS);
    let threads: Vec<_> = (0..CALLERS)
        .map(|c| {
            let caller = caller.to_owned();
            let receiver = receiver.clone();
            std::thread::spawn(move || -> std::result::Result<(), String> {
                let mut client = connect(&caller).map_err(|e| e.to_string())?;
                for i in (c * per)..((c + 1) * per).min(runs) {
                    let reply = process(
                        &mut client,
                        ProcessCall::Run {
                            request: RunRequest {
                                request: format!("run-{i}"),
                                process: "demo.count".to_owned(),
                                arguments: BTreeMap::new(),
                            },
                            receiver: receiver.clone(),
                            via: None,
                            membership: "ops".to_owned(),
                            wait_ms: Some(WAIT_MS),
                            mission: None,
                        },
                    )?;
                    match reply {
                        ProcessReply::Ran { run } if run.outcome == RunOutcome::Succeeded => {}
                        other => return Err(format!("run-{i}: {other:?}")),
                    }
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "a caller panicked")??;
    }
    Ok(())
}

/// Two hosts in `ops` for the benchmarks of history (`key_rotation`, `control_render`):
/// `edge` (the authority's one voter) publishes `routes` Ordered routes to `peer` and
/// issues `peer` a grant of `runs + 1` units for [`retain_runs`]. `edge_lines` and
/// `peer_lines` are more lines of each host's block; `peer_profiles` more profiles.
pub fn history_topology(
    bench: &str,
    ports: &[u16],
    (routes, runs): (usize, usize),
    edge_lines: &str,
    (peer_profiles, peer_lines): (&str, &str),
) -> String {
    let mut text = format!(
        r#"grid version=1
// Written by benches {bench}.
membership ops {{
    authority voters=1
}}
host edge listen="127.0.0.1:{}" {{
    member ops
    profiles transport authority delivery processes
{edge_lines}}}
host peer listen="127.0.0.1:{}" {{
    member ops
    profiles transport delivery processes{peer_profiles}
{peer_lines}}}
grant peer-on-edge issuer=edge caller=peer units={}
"#,
        ports[0],
        ports[1],
        runs + 1
    );
    for r in 0..routes {
        text += &format!(
            "route r{r} membership=ops class=ordered {{\n    publisher edge\n    destination peer\n}}\n"
        );
    }
    text
}
