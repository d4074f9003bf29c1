//! Processes read through a host's control socket, for the benchmarks that run them
//! (`process_compare`, `mission_compare`): a served connection, one call, and what a
//! receiver holds.

use std::path::Path;

use grid_engine::host::control::Client;
use grid_engine::processes::api::{GrantView, ProcessCall, ProcessReply, RunCounts};
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
