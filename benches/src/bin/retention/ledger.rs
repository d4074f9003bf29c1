//! The ledger workload (`--workload ledger`): one host with profile `ledger` taking
//! `LEDGER_TRANSFERS_PER_S` posted transfers a second, each under a new id, in batches
//! of `BATCH` from one control connection; at each mark the host is SIGKILLed and
//! started again. A restart is the time from the spawn to the first answer of
//! `inspect ledger` (every ledger recovered). After each restart the bench checks the
//! balances against the transfers answered and that the first id still answers as it
//! did (from the id index, with checkpoints on).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use grid_benches::bringup::{GridHosts, one_gridd_per_host};
use grid_benches::limits::RETENTION_LEDGER_TRANSFERS_PER_S;
use grid_benches::procs::{Result, WorkDir, free_ports};
use grid_engine::host::control::Client;
use grid_engine::ledger::api::{LedgerCall, LedgerOp, LedgerOutcome, LedgerReply, LedgerView};
use grid_engine::protocol::{Call, Reply};

use super::{Args, RESTART_TIMEOUT, Restart, rss_kib, walk};

const HOST: &str = "src";
const LEDGER: &str = "bench";
/// Transfers a batch; a batch every `1_000 / (RATE / BATCH)` ms.
const BATCH: u64 = 100;

fn topology(port: u16) -> String {
    format!(
        "grid version=1\nhost {HOST} listen=\"127.0.0.1:{port}\" {{\n    profiles ledger\n}}\n\
         ledger {LEDGER} host={HOST} {{\n    account a currency=\"EUR\"\n    account b currency=\"EUR\"\n}}\n"
    )
}

fn transfer(n: u64) -> LedgerOp {
    LedgerOp::Transfer {
        id: format!("t{n}"),
        debit: "a".to_owned(),
        credit: "b".to_owned(),
        amount: 1,
        currency: "EUR".to_owned(),
        pending: false,
        timeout_s: None,
    }
}

fn call(client: &mut Client, request: LedgerCall) -> Result<LedgerReply> {
    match client.call(&Call::Ledger { request })? {
        Reply::Ledger(reply) => Ok(*reply),
        other => Err(format!("ledger {LEDGER}: {other:?}").into()),
    }
}

/// Submits transfers `next ..` until `due` (since `fed`), paced at the rate; returns
/// the next number.
fn feed(host: &Path, mut next: u64, fed: Instant, due: Duration) -> Result<u64> {
    let mut client = Client::connect(host)?;
    let every = Duration::from_micros(1_000_000 * BATCH / RETENTION_LEDGER_TRANSFERS_PER_S);
    let mut at = fed + Duration::from_micros(1_000_000 * next / RETENTION_LEDGER_TRANSFERS_PER_S);
    while fed.elapsed() < due {
        let ops: Vec<LedgerOp> = (next..next + BATCH).map(transfer).collect();
        match call(
            &mut client,
            LedgerCall::Submit {
                ledger: LEDGER.to_owned(),
                ops,
            },
        )? {
            LedgerReply::Answers { answers, .. }
                if answers.len() as u64 == BATCH
                    && answers
                        .iter()
                        .all(|a| a.outcome == LedgerOutcome::Succeeded) => {}
            other => return Err(format!("transfers from t{next}: {other:?}").into()),
        }
        next += BATCH;
        at += every;
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok(next)
}

/// Waits until the restarted host answers `inspect ledger`: the view and the time
/// since `spawned`.
fn answering(host: &Path, spawned: Instant) -> Result<(LedgerView, Duration)> {
    loop {
        if let Ok(mut client) = Client::connect(host)
            && let Ok(LedgerReply::Inspected(view)) = call(
                &mut client,
                LedgerCall::Inspect {
                    ledger: LEDGER.to_owned(),
                    account: None,
                },
            )
        {
            return Ok((*view, spawned.elapsed()));
        }
        if spawned.elapsed() > RESTART_TIMEOUT {
            return Err(format!("{HOST} did not answer within {RESTART_TIMEOUT:?}").into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// After a restart: every answered transfer posted once, and `t1` answered as it was.
fn check(host: &Path, view: &LedgerView, transfers: u64) -> Result<()> {
    let posted: u128 = view.accounts.iter().map(|a| a.debits_posted).sum();
    if posted != u128::from(transfers) {
        return Err(
            format!("{transfers} transfers answered, {posted} posted after the restart").into(),
        );
    }
    let mut client = Client::connect(host)?;
    match call(
        &mut client,
        LedgerCall::Submit {
            ledger: LEDGER.to_owned(),
            ops: vec![transfer(0)],
        },
    )? {
        LedgerReply::Answers { answers, .. }
            if answers.len() == 1
                && answers[0].outcome == LedgerOutcome::Succeeded
                && answers[0].amount == Some(1) => {}
        other => return Err(format!("t0 re-sent: {other:?}").into()),
    }
    let (again, _) = answering(host, Instant::now())?;
    let again: u128 = again.accounts.iter().map(|a| a.debits_posted).sum();
    if again != posted {
        return Err(format!("t0 re-sent moved {} again", again - posted).into());
    }
    Ok(())
}

/// Runs the ledger workload once (checkpoints `off` or on), restarting at each mark.
pub fn workload(bin_dir: &Path, off: bool, args: &Args) -> Result<Vec<Restart>> {
    let name = if off { "off" } else { "on" };
    let work = WorkDir::new(&format!("grt-ledger-{name}"), args.keep)?;
    super::switch(off);
    let ports = free_ports(1)?;
    let mut hosts = GridHosts::start(
        bin_dir,
        &work.path,
        "retention-ledger.kdl",
        &topology(ports[0]),
        &one_gridd_per_host(&[HOST]),
    )?;
    let src = hosts.host_dir(HOST);
    let fed = Instant::now();
    let mut next = 0;
    let mut out = Vec::new();
    for &minute in &args.minutes.0 {
        next = feed(&src, next, fed, Duration::from_secs(minute * 60))?;
        hosts.procs.check_running()?;
        hosts.procs.kill_and_forget(&format!("gridd {HOST}"))?;
        let store_bytes = walk(&src.join("store"));
        let mut command = Command::new(bin_dir.join("gridd"));
        command.arg("--dir").arg(&src).current_dir(&work.path);
        let log = work.path.join(format!("logs/gridd-{HOST}-{minute}.log"));
        let spawned = Instant::now();
        let pid = hosts.procs.spawn(&format!("gridd {HOST}"), command, &log)?;
        let (view, restart) = answering(&src, spawned)?;
        let rss_kib = rss_kib(pid);
        check(&src, &view, next)?;
        println!(
            "[ledger {name}] minute {minute}: {next} transfers, store {:.1} MB, restart {:.0} ms, RSS {:.1} MiB",
            store_bytes as f64 / 1e6,
            restart.as_secs_f64() * 1e3,
            rss_kib as f64 / 1024.0
        );
        out.push(Restart {
            minute,
            observations: next,
            store_bytes,
            restart,
            rss_kib,
        });
    }
    Ok(out)
}
