//! Grid's side: one host with profile `ledger`, brought up the way the journeys do it
//! (`grid_benches::bringup`: a topology file, `gridctl reconcile`, `gridd`, `gridctl
//! reconcile` until the plan is empty), holding `ledger bench` with accounts `a0001` …
//! (currency `EUR`, no balance flags). Each connection is one thread with one control
//! socket that submits, back to back, `Call::Ledger { Submit }` with a batch of pending
//! transfers and then one with their posts (`post`, whole amount).

use std::path::{Path, PathBuf};
use std::time::Instant;

use grid_engine::host::control::Client;
use grid_engine::ledger::api::{LedgerCall, LedgerOp, LedgerOutcome, LedgerReply, LedgerView};
use grid_engine::protocol::{Call, Reply};

use grid_benches::bringup::{GridHosts, connect_served, one_gridd_per_host};
use grid_benches::cli::Measurement;
use grid_benches::limits::{LEDGER_COMPARE_ACCOUNTS_MAX, LEDGER_COMPARE_BATCH_MAX};
use grid_benches::measure::{Window, on_threads};
use grid_benches::procs::{Result, free_ports};

use crate::rows::{Cell, GRID, Unit};

pub const HOST: &str = "books";
pub const LEDGER: &str = "bench";
const CURRENCY: &str = "EUR";

// Grid's own limits bound the benchmark's: every account in one `ledger` node, every
// batch in one Submit.
const _: () = assert!(LEDGER_COMPARE_ACCOUNTS_MAX <= grid_spec::limits::LEDGER_ACCOUNTS_MAX);
const _: () = assert!(LEDGER_COMPARE_BATCH_MAX <= grid_engine::limits::LEDGER_BATCH_TRANSFERS_MAX);

fn account(i: usize) -> String {
    format!("a{:04}", i + 1)
}

fn topology(port: u16, accounts: usize) -> String {
    // The ledger profile needs nothing else: no membership, no transport.
    let mut text = format!(
        "grid version=1\n\n// Written by benches ledger_compare.\nhost {HOST} listen=\"127.0.0.1:{port}\" {{\n    profiles ledger\n}}\n"
    );
    text.push_str(&format!("ledger {LEDGER} host={HOST} {{\n"));
    for i in 0..accounts {
        text.push_str(&format!(
            "    account {} currency=\"{CURRENCY}\"\n",
            account(i)
        ));
    }
    text.push_str("}\n");
    text
}

/// The ledger host.
pub struct GridLedger {
    pub hosts: GridHosts,
    pub port: u16,
    accounts: usize,
    /// Posts that succeeded and their amounts, warm-ups included.
    posted: u64,
    posted_amount: u128,
}

impl GridLedger {
    pub fn start(bin_dir: &Path, work: &Path, accounts: usize) -> Result<GridLedger> {
        let port = free_ports(1)?[0];
        let hosts = GridHosts::start(
            bin_dir,
            &work.join("grid"),
            "topology.kdl",
            &topology(port, accounts),
            &one_gridd_per_host(&[HOST]),
        )?;
        Ok(GridLedger {
            hosts,
            port,
            accounts,
            posted: 0,
            posted_amount: 0,
        })
    }

    fn host_dir(&self) -> PathBuf {
        self.hosts.host_dir(HOST)
    }

    /// One measurement with `connections` threads (measurement `index` of the run: its
    /// ids are new).
    pub fn measure(
        &mut self,
        m: &Measurement,
        batch: usize,
        connections: usize,
        index: usize,
        t0: Instant,
    ) -> Result<Cell> {
        let mut callers = Vec::with_capacity(connections);
        for i in 0..connections {
            callers.push(Connection::connect(
                &self.host_dir(),
                self.accounts,
                (index * 1_000 + i + 1) as u32,
            )?);
        }
        let window = Window::of(m.warmup, m.seconds, t0);
        let (records, meter) = on_threads(
            callers,
            window,
            t0,
            self.hosts.procs.pids(),
            move |connection, i, seq| connection.unit(&format!("{index}.{i}.{seq}"), batch),
        )?;
        let cpu = meter.stop();
        self.hosts.procs.check_running()?;
        for record in &records {
            for call in &record.calls {
                self.posted += call.value.posted;
                self.posted_amount += call.value.posted_amount;
            }
        }
        Ok(Cell::new(GRID, connections, true, &window, records, cpu))
    }

    /// The host's balances against what the connections posted.
    pub fn check(&self) -> Result<String> {
        let mut client = Client::connect(&self.host_dir())?;
        let view: LedgerView = match client.call(&Call::Ledger {
            request: LedgerCall::Inspect {
                ledger: LEDGER.to_owned(),
                account: None,
            },
        })? {
            Reply::Ledger(reply) => match *reply {
                LedgerReply::Inspected(view) => *view,
                other => return Err(format!("inspect ledger {LEDGER}: {other:?}").into()),
            },
            other => return Err(format!("inspect ledger {LEDGER}: {other:?}").into()),
        };
        let sum = |f: fn(&grid_engine::ledger::api::AccountView) -> u128| {
            view.accounts.iter().map(f).sum::<u128>()
        };
        let debits_posted = sum(|a| a.debits_posted);
        let credits_posted = sum(|a| a.credits_posted);
        let debits_pending = sum(|a| a.debits_pending);
        let credits_pending = sum(|a| a.credits_pending);
        let ok = debits_posted == self.posted_amount
            && credits_posted == self.posted_amount
            && debits_pending == 0
            && credits_pending == 0
            && view.counts.posts == self.posted
            && view.counts.pending_open == 0;
        Ok(format!(
            "{GRID}: {} two-phase transfers posted (the host counts {} posts, {} pending open, \
             {} refused); debits posted {debits_posted}, credits posted {credits_posted}, their \
             posted amounts {}; pending {debits_pending} / {credits_pending}: {}",
            self.posted,
            view.counts.posts,
            view.counts.pending_open,
            view.counts.refused,
            self.posted_amount,
            if ok { "consistent" } else { "MISMATCH" }
        ))
    }
}

/// One control connection to the ledger host and its own random accounts and amounts.
pub struct Connection {
    client: Client,
    accounts: usize,
    state: u32,
}

impl Connection {
    fn connect(host_dir: &Path, accounts: usize, seed: u32) -> Result<Connection> {
        // A cheap call that changes nothing.
        let probe = Call::Ledger {
            request: LedgerCall::Lookup {
                ledger: LEDGER.to_owned(),
                ids: Vec::new(),
            },
        };
        let client = connect_served(
            host_dir,
            &probe,
            |reply| matches!(reply, Reply::Ledger(r) if matches!(**r, LedgerReply::Retained { .. })),
        )?;
        Ok(Connection {
            client,
            accounts,
            state: seed.wrapping_mul(2_654_435_761).max(1),
        })
    }

    /// xorshift32: the same generator as the TigerBeetle script's.
    fn random(&mut self) -> u32 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.state = x;
        x
    }

    fn submit(&mut self, ops: Vec<LedgerOp>) -> std::result::Result<Vec<LedgerOutcomeOf>, String> {
        let sent = ops.len();
        let reply = self
            .client
            .call(&Call::Ledger {
                request: LedgerCall::Submit {
                    ledger: LEDGER.to_owned(),
                    ops,
                },
            })
            .map_err(|e| format!("call error: {e}"))?;
        match reply {
            Reply::Ledger(reply) => match *reply {
                LedgerReply::Answers { answers, .. } if answers.len() == sent => Ok(answers
                    .into_iter()
                    .map(|a| match a.outcome {
                        LedgerOutcome::Succeeded => Ok(a.amount),
                        LedgerOutcome::Refused => {
                            Err(a.reason.unwrap_or_else(|| "refused".to_owned()))
                        }
                    })
                    .collect()),
                LedgerReply::Answers { answers, .. } => {
                    Err(format!("{} answers to {sent} operations", answers.len()))
                }
                LedgerReply::Refused { reason } => Err(format!("batch refused: {reason}")),
                other => Err(format!("{other:?}")),
            },
            other => Err(format!("{other:?}")),
        }
    }

    /// A batch of `batch` pending transfers, then the batch of their posts; ids
    /// `t{tag}.{k}` and `p{tag}.{k}`.
    fn unit(&mut self, tag: &str, batch: usize) -> std::result::Result<Unit, String> {
        let mut pendings = Vec::with_capacity(batch);
        for k in 0..batch {
            let n = self.accounts as u32;
            let debit = self.random() % n;
            let credit = (debit + 1 + self.random() % (n - 1)) % n;
            pendings.push(LedgerOp::Transfer {
                id: format!("t{tag}.{k}"),
                debit: account(debit as usize),
                credit: account(credit as usize),
                amount: u128::from(self.random() % 1_000 + 1),
                currency: CURRENCY.to_owned(),
                pending: true,
                timeout_s: None,
            });
        }
        let mut unit = Unit::default();
        let mut refused = std::collections::BTreeMap::<String, u64>::new();
        let started = Instant::now();
        let answers = self.submit(pendings)?;
        unit.batch_ns.push(started.elapsed().as_nanos() as u64);
        let mut posts = Vec::with_capacity(batch);
        for (k, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(_) => posts.push(LedgerOp::Post {
                    id: format!("p{tag}.{k}"),
                    pending_id: format!("t{tag}.{k}"),
                    amount: None,
                }),
                Err(reason) => *refused.entry(reason).or_default() += 1,
            }
        }
        let started = Instant::now();
        let answers = self.submit(posts)?;
        unit.batch_ns.push(started.elapsed().as_nanos() as u64);
        for answer in answers {
            match answer {
                Ok(amount) => {
                    unit.posted += 1;
                    unit.posted_amount += amount.unwrap_or(0);
                }
                Err(reason) => *refused.entry(reason).or_default() += 1,
            }
        }
        unit.refused = refused.into_iter().collect();
        Ok(unit)
    }
}

/// One operation's answer: what moved, or why it was refused.
type LedgerOutcomeOf = std::result::Result<Option<u128>, String>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_declares_every_account_and_loads() {
        let text = topology(7_999, 3);
        assert!(text.contains("account a0003 currency=\"EUR\""));
        assert!(!text.contains("a0004"));
        let topology = grid_spec::load_str("ledger.kdl", &text)
            .unwrap_or_else(|d| panic!("the benchmark's topology does not load: {d:?}"));
        assert_eq!(topology.ledgers.len(), 1);
        assert_eq!(topology.ledgers[0].accounts.len(), 3);
    }
}
