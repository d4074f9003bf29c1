//! The coordination authority's read side and its faults (SPEC C3); the claim
//! commands themselves are in `claims.rs`.
//!
//! - `expect-claim CLAIM [membership="M"] owner="HOST" epoch=N` — `gridctl claim show`
//!   after a barrier; or `barrier="unknown"` when no barrier can pass.
//! - `expect-authority M [barrier="ok"|"unknown"] [voters=N] [agree=#true]
//!   [snapshot-files=N] [purged=#true] [not-leader="HOST"] [installed="HOST=N"]` —
//!   `gridctl inspect authority M --json`; `installed`: snapshots HOST installed from a
//!   leader since it started; `purged`: every running voter's log is purged through
//!   its snapshot (waited for, bounded: a leader postpones a purge while a replication
//!   request in flight uses the logs). `agree` waits (bounded) until every voter has applied the same
//!   index in the same term; `snapshot-files` and `purged` hold at every voter.
//!   With `snapshots "s3://…"`: `fetched="HOST=N"` (or `"HOST=N+"`: at least N) —
//!   snapshots HOST fetched from the bucket since it started; `snapshot-error="TEXT"` — waits (bounded) until a voter's
//!   snapshot store shows a last error holding TEXT (a put or fetch refused, named).
//!   `holds-seconds=N` (at most 60): every check made again twice a second for N s.
//! - `authority-snapshot M host="HOST"` — builds a snapshot at HOST now.
//! - `kill-leader M` — SIGKILLs the host the read barrier confirms as leader.
//! - `restart-stopped` — starts again every installed host that is not running.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use super::Step;
use super::gridctl::Quiet;
use crate::context::Context;
use crate::error::Failure;
use crate::process::describe_status;
use crate::process::quote_output;
use crate::step::{Node, ParseError};

/// How long `expect-authority … agree=#true` waits for the voters to agree.
const AGREE_TIMEOUT: Duration = Duration::from_secs(30);

// ---- expect-claim --------------------------------------------------------------------

struct ExpectClaim {
    claim: String,
    membership: Option<String>,
    owner: Option<String>,
    epoch: Option<u64>,
    barrier: String,
}

pub fn parse_expect_claim(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(ExpectClaim {
        claim: node.argument("a claim name")?,
        membership: node.string("membership")?,
        owner: node.string("owner")?,
        epoch: node.count("epoch")?,
        barrier: node.string("barrier")?.unwrap_or_else(|| "ok".to_owned()),
    }))
}

impl Step for ExpectClaim {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mut args: Vec<OsString> = vec![
            "claim".into(),
            "show".into(),
            self.claim.clone().into(),
            "--json".into(),
        ];
        if let Some(m) = &self.membership {
            args.extend(["--membership".into(), m.into()]);
        }
        let output = cx.gridctl(&args)?;
        let json: serde_json::Value = serde_json::from_str(output.stdout.trim()).map_err(|_| {
            Failure::new(
                "claim show JSON",
                format!(
                    "{}; stdout: {}; stderr: {}",
                    describe_status(&output.status),
                    quote_output(&output.stdout),
                    quote_output(&output.stderr)
                ),
            )
        })?;
        cx.say(format_args!("→ {json}"));
        let barrier = json.get("barrier").and_then(|b| b.as_str()).unwrap_or("");
        if barrier != self.barrier {
            return Err(Failure::new(
                format!("barrier {}", self.barrier),
                json.to_string(),
            ));
        }
        if let Some(owner) = &self.owner
            && json.get("owner").and_then(|o| o.as_str()) != Some(owner)
        {
            return Err(Failure::new(format!("owner {owner}"), json.to_string()));
        }
        if let Some(epoch) = self.epoch
            && json.get("epoch").and_then(|o| o.as_u64()) != Some(epoch)
        {
            return Err(Failure::new(format!("epoch {epoch}"), json.to_string()));
        }
        Ok(())
    }
}

// ---- expect-authority ----------------------------------------------------------------

struct ExpectAuthority {
    membership: String,
    barrier: Option<String>,
    voters: Option<u64>,
    agree: bool,
    snapshot_files: Option<u64>,
    purged: bool,
    not_leader: Option<String>,
    /// `(host, n)`: snapshots host installed from a leader since it started.
    installed: Option<(String, u64)>,
    /// `(host, n, at least)`: snapshots host fetched from its snapshot store since it
    /// started (`"HOST=N+"`: at least N — a fetch whose install a newer vote made
    /// obsolete counts too).
    fetched: Option<(String, u64, bool)>,
    /// Text a voter's snapshot store's last error holds (waited for).
    snapshot_error: Option<String>,
    /// `holds-seconds=N`: every check is made again, twice a second, for N seconds
    /// (what must not happen — a voter installing a snapshot — does not, for that long).
    holds: Option<u64>,
}

/// `"HOST=N"` of property `key`.
fn host_count(node: &mut Node<'_>, key: &str) -> Result<Option<(String, u64)>, ParseError> {
    match node.string(key)? {
        None => Ok(None),
        Some(text) => {
            let parsed = text
                .split_once('=')
                .and_then(|(h, n)| Some((h.to_owned(), n.parse::<u64>().ok()?)));
            Ok(Some(parsed.ok_or_else(|| {
                node.error(format!("`{key}` is \"HOST=N\""))
            })?))
        }
    }
}

pub fn parse_expect_authority(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let membership = node.argument("a membership")?;
    Ok(Box::new(ExpectAuthority {
        membership,
        barrier: node.string("barrier")?,
        voters: node.count("voters")?,
        agree: node.flag("agree")?.unwrap_or(false),
        snapshot_files: node.count("snapshot-files")?,
        purged: node.flag("purged")?.unwrap_or(false),
        not_leader: node.string("not-leader")?,
        installed: host_count(node, "installed")?,
        fetched: match node.string("fetched")? {
            None => None,
            Some(text) => {
                let at_least = text.ends_with('+');
                let parsed = text
                    .trim_end_matches('+')
                    .split_once('=')
                    .and_then(|(h, n)| Some((h.to_owned(), n.parse::<u64>().ok()?, at_least)));
                Some(parsed.ok_or_else(|| node.error("`fetched` is \"HOST=N\" or \"HOST=N+\""))?)
            }
        },
        snapshot_error: node.string("snapshot-error")?,
        holds: node.count("holds-seconds")?,
    }))
}

fn inspect(
    cx: &mut Context<'_>,
    membership: &str,
    quiet: bool,
) -> Result<serde_json::Value, Failure> {
    let args: Vec<OsString> = vec![
        "inspect".into(),
        "authority".into(),
        membership.into(),
        "--json".into(),
    ];
    let output = if quiet {
        Quiet::new(cx)
            .output(&args, "inspect")
            .map_err(|e| Failure::new("gridctl inspect authority to finish", format!("{e:?}")))?
            .stdout
    } else {
        cx.gridctl(&args)?.stdout
    };
    serde_json::from_str(output.trim()).map_err(|_| {
        Failure::new(
            "inspect authority JSON",
            format!("stdout: {}", quote_output(&output)),
        )
    })
}

/// A member whose log is purged through its snapshot.
fn purged_through_snapshot(member: &serde_json::Value) -> bool {
    let index = |k: &str| member.get(k).and_then(|v| v.as_u64());
    matches!((index("purged"), index("snapshot")), (Some(p), Some(s)) if p >= s)
}

fn members(json: &serde_json::Value) -> Vec<&serde_json::Value> {
    json.get("members")
        .and_then(|m| m.as_array())
        .map(|m| m.iter().collect())
        .unwrap_or_default()
}

impl Step for ExpectAuthority {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        self.check(cx, false)?;
        if let Some(seconds) = self.holds {
            let until = Instant::now() + Duration::from_secs(seconds.min(60));
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(500));
                self.check(cx, true)?;
            }
            cx.say(format_args!("  held for {seconds} s"));
        }
        Ok(())
    }
}

impl ExpectAuthority {
    fn check(&self, cx: &mut Context<'_>, quiet: bool) -> Result<(), Failure> {
        let mut json = inspect(cx, &self.membership, quiet)?;
        // `barrier="ok"` waits (bounded) for an election to end: a leader is elected
        // within a few election timeouts after a voter died.
        if self.barrier.as_deref() == Some("ok") {
            let started = Instant::now();
            while json.get("barrier").and_then(|b| b.as_str()) != Some("ok")
                && started.elapsed() < AGREE_TIMEOUT
            {
                std::thread::sleep(Duration::from_millis(200));
                json = inspect(cx, &self.membership, true)?;
            }
            if started.elapsed() > Duration::from_millis(100) {
                cx.say(format_args!(
                    "the barrier passed after {:.1} s (an election)",
                    started.elapsed().as_secs_f64()
                ));
            }
        }
        if self.agree {
            let deadline = Instant::now() + AGREE_TIMEOUT;
            loop {
                let views: Vec<(Option<u64>, Option<u64>)> = members(&json)
                    .iter()
                    .map(|m| {
                        (
                            m.get("term").and_then(|t| t.as_u64()),
                            m.get("last_applied").and_then(|t| t.as_u64()),
                        )
                    })
                    .collect();
                let agreed = !views.is_empty()
                    && views
                        .iter()
                        .all(|v| v.0.is_some() && v.1.is_some() && *v == views[0]);
                if agreed {
                    cx.say(format_args!(
                        "every voter applied through {} in term {}",
                        views[0].1.unwrap_or(0),
                        views[0].0.unwrap_or(0)
                    ));
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Failure::new(
                        format!(
                            "every voter to agree within AGREE_TIMEOUT ({} s)",
                            AGREE_TIMEOUT.as_secs()
                        ),
                        format!("(term, applied) per voter: {views:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
                json = inspect(cx, &self.membership, true)?;
            }
        }
        // `purged` waits (bounded) for every running voter to purge through its
        // snapshot: a leader postpones purging while a replication request in flight
        // still uses the logs (e.g. to a voter that just died).
        if self.purged {
            let deadline = Instant::now() + AGREE_TIMEOUT;
            while !members(&json)
                .iter()
                .all(|m| m.get("unreachable").is_some() || purged_through_snapshot(m))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(200));
                json = inspect(cx, &self.membership, true)?;
            }
        }
        if let Some(text) = &self.snapshot_error {
            let shows = |json: &serde_json::Value| {
                members(json).iter().find_map(|m| {
                    let error = m.pointer("/snapshot_store/last_error")?.as_str()?;
                    error.contains(text.as_str()).then(|| error.to_owned())
                })
            };
            let deadline = Instant::now() + AGREE_TIMEOUT;
            loop {
                if let Some(error) = shows(&json) {
                    cx.say(format_args!("  a snapshot store shows: {error}"));
                    break;
                }
                if Instant::now() > deadline {
                    let errors: Vec<_> = members(&json)
                        .iter()
                        .map(|m| m.pointer("/snapshot_store/last_error").cloned())
                        .collect();
                    return Err(Failure::new(
                        format!("a snapshot store's last error holding {text:?}"),
                        format!("{errors:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
                json = inspect(cx, &self.membership, true)?;
            }
        }
        let field = |k: &str| json.get(k).cloned().unwrap_or(serde_json::Value::Null);
        cx.say(format_args!(
            "→ barrier {}, leader {}, voters {}, term {}",
            field("barrier"),
            field("leader"),
            field("voters"),
            field("term")
        ));
        if let Some(barrier) = &self.barrier
            && field("barrier").as_str() != Some(barrier)
        {
            return Err(Failure::new(
                format!("barrier {barrier}"),
                format!("{} ({})", field("barrier"), field("barrier_detail")),
            ));
        }
        if self.barrier.as_deref() == Some("unknown") && !field("leader").is_null() {
            return Err(Failure::new(
                "no leader shown when the barrier is unknown",
                format!("leader {}", field("leader")),
            ));
        }
        if let Some(n) = self.voters {
            let count = field("voters").as_array().map_or(0, |v| v.len()) as u64;
            if count != n {
                return Err(Failure::new(
                    format!("{n} voters"),
                    field("voters").to_string(),
                ));
            }
        }
        if let Some(host) = &self.not_leader
            && field("leader").as_str() == Some(host)
        {
            return Err(Failure::new(
                format!("a leader other than {host}"),
                field("leader").to_string(),
            ));
        }
        for m in members(&json) {
            let name = m.get("participant").cloned().unwrap_or_default();
            if let Some(n) = self.snapshot_files {
                let files = m
                    .get("snapshot_files")
                    .and_then(|f| f.as_array())
                    .map_or(0, |f| f.len()) as u64;
                if files != n {
                    return Err(Failure::new(
                        format!("{n} snapshot file(s) at {name}"),
                        m.get("snapshot_files")
                            .cloned()
                            .unwrap_or_default()
                            .to_string(),
                    ));
                }
            }
            if self.purged && m.get("unreachable").is_none() && !purged_through_snapshot(m) {
                return Err(Failure::new(
                    format!("a log purged through the snapshot at {name}"),
                    m.to_string(),
                ));
            }
        }
        if let Some((host, n)) = &self.installed {
            let member = members(&json)
                .into_iter()
                .find(|m| m.get("participant").and_then(|p| p.as_str()) == Some(host));
            let count = member
                .and_then(|m| m.get("snapshots_installed"))
                .and_then(|c| c.as_u64());
            cx.say(format_args!(
                "  {host} installed {count:?} snapshot(s) from the leader"
            ));
            if count != Some(*n) {
                return Err(Failure::new(
                    format!("{host} installed exactly {n} snapshot(s) since it started"),
                    format!("{count:?}"),
                ));
            }
        }
        if let Some((host, n, at_least)) = &self.fetched {
            let member = members(&json)
                .into_iter()
                .find(|m| m.get("participant").and_then(|p| p.as_str()) == Some(host));
            let count = member
                .and_then(|m| m.pointer("/snapshot_store/fetched"))
                .and_then(|c| c.as_u64());
            cx.say(format_args!(
                "  {host} fetched {count:?} snapshot(s) from its snapshot store"
            ));
            let fits = match at_least {
                true => count.is_some_and(|c| c >= *n),
                false => count == Some(*n),
            };
            if !fits {
                return Err(Failure::new(
                    format!(
                        "{host} fetched {} {n} snapshot(s) from the bucket since it started",
                        if *at_least { "at least" } else { "exactly" }
                    ),
                    format!("{count:?}"),
                ));
            }
        }
        if self.snapshot_files.is_some() || self.purged {
            for m in members(&json) {
                cx.say(format_args!(
                    "  {}: snapshot {} purged {} files {}",
                    m.get("participant").cloned().unwrap_or_default(),
                    m.get("snapshot").cloned().unwrap_or_default(),
                    m.get("purged").cloned().unwrap_or_default(),
                    m.get("snapshot_files").cloned().unwrap_or_default()
                ));
            }
        }
        Ok(())
    }
}

// ---- authority-snapshot, kill-leader, restart-stopped -------------------------------

struct Snapshot {
    membership: String,
    host: String,
}

pub fn parse_snapshot(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let membership = node.argument("a membership")?;
    let host = node.required_host("host")?;
    Ok(Box::new(Snapshot { membership, host }))
}

impl Step for Snapshot {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let args: Vec<OsString> = vec![
            "authority".into(),
            "snapshot".into(),
            self.membership.clone().into(),
            "--host".into(),
            self.host.clone().into(),
        ];
        let output = cx.gridctl(&args)?;
        cx.say(format_args!("→ {}", output.stdout.trim()));
        if !output.status.success() {
            return Err(Failure::new(
                "a snapshot",
                format!(
                    "{}; stderr: {}",
                    describe_status(&output.status),
                    quote_output(&output.stderr)
                ),
            ));
        }
        Ok(())
    }
}

/// The leader a read barrier confirms (waiting a few elections for one).
pub(super) fn confirmed_leader(cx: &mut Context<'_>, membership: &str) -> Result<String, Failure> {
    let deadline = Instant::now() + AGREE_TIMEOUT;
    loop {
        let json = inspect(cx, membership, true)?;
        if let Some(leader) = json.get("leader").and_then(|l| l.as_str()) {
            return Ok(leader.to_owned());
        }
        if Instant::now() > deadline {
            return Err(Failure::new(
                "a leader confirmed by a read barrier",
                format!("{} ({})", json["barrier"], json["barrier_detail"]),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct KillLeader {
    membership: String,
}

pub fn parse_kill_leader(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(KillLeader {
        membership: node.argument("a membership")?,
    }))
}

impl Step for KillLeader {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let leader = confirmed_leader(cx, &self.membership)?;
        cx.say(format_args!("the leader is `{leader}`: SIGKILL"));
        cx.kill_host(&leader)?;
        Ok(())
    }
}

struct RestartStopped;

pub fn parse_restart_stopped(_node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(RestartStopped))
}

impl Step for RestartStopped {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let hosts = std::fs::read_dir(cx.state_dir().join("hosts"))
            .map(|entries| {
                let mut names: Vec<String> = entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect();
                names.sort();
                names
            })
            .unwrap_or_default();
        for host in hosts {
            if !cx.host_running(&host) {
                cx.say(format_args!("start `{host}` again"));
                cx.start_host(&host, None)?;
            }
        }
        Ok(())
    }
}
