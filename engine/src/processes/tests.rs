//! The run machine and the grants' units under interleavings (proptest): many runs
//! admitted, finished, crashed before their outcome's journal, restarted, resolved,
//! recovered from their Process's own record, barred by a caller's cancel before
//! dispatch, grants issued, surrendered and settled, with request ids repeated — driven as `receiver.rs` and `service.rs` drive them,
//! with an in-memory journal in place of the store (one step, one write).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::api::{GrantView, RunOutcome};
use super::grants;
use super::runs::{Resolution, Run, RunError, RunUnits};

const CALLER: &str = "hq";
const GRANT_NAMES: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    /// A request arrives (ids repeat: a small set).
    Admit(u8),
    /// The Process of a run dispatched in this incarnation returns; its outcome is not
    /// journaled yet.
    Returned(u8, bool),
    /// The returned outcome is journaled with its unit's move.
    Journal(u8),
    /// The receiver stops: what was not journaled is lost; on restart a run admitted
    /// without an outcome becomes unknown.
    Crash,
    /// The operator resolves a run.
    Resolve(u8, bool),
    /// A signed issue adds units to a grant.
    Issue(usize, u8),
    /// A grant is surrendered.
    Surrender(usize),
    /// After a restart, the Process's own record proves an unknown run's outcome.
    Recovered(u8, bool),
    /// The caller cancels: a request never journaled is barred (with its proof).
    Cancel(u8),
    /// The issuer settles a grant (refused while a unit is held).
    Settle(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u8..8;
    prop_oneof![
        4 => id.clone().prop_map(Op::Admit),
        3 => (id.clone(), any::<bool>()).prop_map(|(i, ok)| Op::Returned(i, ok)),
        3 => id.clone().prop_map(Op::Journal),
        1 => Just(Op::Crash),
        2 => (id, any::<bool>()).prop_map(|(i, ok)| Op::Resolve(i, ok)),
        1 => (0..GRANT_NAMES.len(), 0u8..4).prop_map(|(g, u)| Op::Issue(g, u)),
        1 => (0..GRANT_NAMES.len()).prop_map(Op::Surrender),
        2 => (0u8..8, any::<bool>()).prop_map(|(i, ok)| Op::Recovered(i, ok)),
        1 => (0u8..8).prop_map(Op::Cancel),
        1 => (0..GRANT_NAMES.len()).prop_map(Op::Settle),
    ]
}

/// The receiver as the journal holds it, and what this incarnation holds in memory.
struct Receiver {
    grants: BTreeMap<String, GrantView>,
    /// The run journal: each run and the grant charged.
    journal: BTreeMap<u8, (Run, Option<String>)>,
    /// Dispatched in this incarnation, the Process not returned.
    running: BTreeSet<u8>,
    /// Returned, its outcome not journaled (lost by a crash).
    returned: BTreeMap<u8, bool>,
    /// How often each request id's Process was started.
    executions: BTreeMap<u8, u32>,
    /// The first terminal state each run reached.
    terminal: BTreeMap<u8, (RunOutcome, RunUnits)>,
    /// Ids barred by a cancel (a proof of no dispatch was signed for each).
    barred: BTreeSet<u8>,
    /// Settled grants and the account their settlement states.
    settled: BTreeMap<String, (u64, u64, u64)>,
}

impl Receiver {
    fn new(units: [u8; 2]) -> Receiver {
        let grants = GRANT_NAMES
            .iter()
            .zip(units)
            .map(|(name, units)| {
                let grant = GrantView {
                    name: (*name).to_owned(),
                    caller: CALLER.to_owned(),
                    allocated: u64::from(units),
                    ..GrantView::default()
                };
                ((*name).to_owned(), grant)
            })
            .collect();
        Receiver {
            grants,
            journal: BTreeMap::new(),
            running: BTreeSet::new(),
            returned: BTreeMap::new(),
            executions: BTreeMap::new(),
            terminal: BTreeMap::new(),
            barred: BTreeSet::new(),
            settled: BTreeMap::new(),
        }
    }

    fn grant(&mut self, name: &Option<String>) -> &mut GrantView {
        let name = name.as_ref().expect("a charged run names its grant");
        self.grants.get_mut(name).expect("a run's grant is held")
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Admit(id) => {
                if self.journal.contains_key(&id) {
                    // Answered from the journal (or waits for the running one).
                    return;
                }
                let admitted = match grants::reserve(self.grants.values_mut(), CALLER, "plant") {
                    Err(_) => (Run::refused(), None),
                    Ok(name) => {
                        self.running.insert(id);
                        *self.executions.entry(id).or_default() += 1;
                        (Run::dispatched(), Some(name))
                    }
                };
                self.journal.insert(id, admitted);
            }
            Op::Returned(id, ok) => {
                if self.running.remove(&id) {
                    self.returned.insert(id, ok);
                }
            }
            Op::Journal(id) => {
                if let Some(ok) = self.returned.remove(&id) {
                    let (mut run, name) = self.journal[&id].clone();
                    let moved = run.finish(ok).expect("a dispatched run finishes once");
                    grants::apply(self.grant(&name), moved).expect("its unit is reserved");
                    self.journal.insert(id, (run, name));
                }
            }
            Op::Crash => {
                self.running.clear();
                self.returned.clear();
                for id in self.journal.keys().copied().collect::<Vec<_>>() {
                    let (mut run, name) = self.journal[&id].clone();
                    if let Ok(moved) = run.interrupted() {
                        grants::apply(self.grant(&name), moved).expect("its unit is reserved");
                        self.journal.insert(id, (run, name));
                    }
                }
            }
            Op::Resolve(id, succeeded) => {
                let Some((before, name)) = self.journal.get(&id).cloned() else {
                    return;
                };
                let outcome = if succeeded {
                    RunOutcome::Succeeded
                } else {
                    RunOutcome::Failed
                };
                let mut run = before;
                match run.resolve(outcome) {
                    Ok(Resolution::Already) => {
                        assert!(before.resolved && before.outcome == outcome);
                        assert_eq!(run, before, "resolving again changes nothing");
                    }
                    Ok(Resolution::Moved(moved)) => {
                        assert_eq!(before.units, RunUnits::Unknown, "only unknown runs resolve");
                        grants::apply(self.grant(&name), moved).expect("its unit is unknown");
                        self.journal.insert(id, (run, name));
                        // Idempotent for the same outcome, refused for the other.
                        let mut again = run;
                        assert_eq!(again.resolve(outcome), Ok(Resolution::Already));
                        let other = if succeeded {
                            RunOutcome::Failed
                        } else {
                            RunOutcome::Succeeded
                        };
                        assert_eq!(
                            again.resolve(other),
                            Err(RunError::AlreadyResolved(outcome))
                        );
                        assert_eq!(again, run);
                    }
                    Err(_) => {
                        assert_eq!(run, before, "a refused step changes nothing");
                        assert!(
                            before.units != RunUnits::Unknown || before.resolved,
                            "an unresolved unknown run resolves"
                        );
                    }
                }
            }
            Op::Issue(g, units) => {
                let grant = self.grants.get_mut(GRANT_NAMES[g]).expect("held");
                if !grant.retired {
                    grant.allocated += u64::from(units);
                }
            }
            Op::Surrender(g) => {
                grants::surrender(self.grants.get_mut(GRANT_NAMES[g]).expect("held"));
            }
            Op::Recovered(id, succeeded) => {
                let Some((before, name)) = self.journal.get(&id).cloned() else {
                    return;
                };
                let mut run = before;
                match run.recovered(succeeded) {
                    Ok(moved) => {
                        assert_eq!(before.units, RunUnits::Unknown);
                        grants::apply(self.grant(&name), moved).expect("its unit is unknown");
                        self.journal.insert(id, (run, name));
                    }
                    Err(_) => assert_eq!(run, before, "a refused step changes nothing"),
                }
            }
            Op::Cancel(id) => {
                // Under the journal's lock: only an id never journaled is barred;
                // a journaled one is answered as it stands.
                if let std::collections::btree_map::Entry::Vacant(e) = self.journal.entry(id) {
                    e.insert((Run::refused(), None));
                    self.barred.insert(id);
                }
            }
            Op::Settle(g) => {
                let grant = &self.grants[GRANT_NAMES[g]];
                match grants::settleable(grant) {
                    Ok(()) => {
                        let account = (grant.allocated, grant.consumed, grant.surrendered);
                        let first = *self.settled.entry(grant.name.clone()).or_insert(account);
                        assert_eq!(first, account, "settling again states the same account");
                    }
                    Err(_) => assert!(
                        !grant.retired || grant.reserved + grant.unknown > 0,
                        "a retired grant with nothing held settles: {grant:?}"
                    ),
                }
            }
        }
    }

    fn check(&mut self) {
        for (id, n) in &self.executions {
            assert!(*n <= 1, "request {id} ran {n} times");
            assert!(
                !self.barred.contains(id),
                "barred request {id} was dispatched"
            );
        }
        for (name, account) in &self.settled {
            let g = &self.grants[name];
            assert_eq!(
                (g.allocated, g.consumed, g.surrendered),
                *account,
                "a settled grant's account never moves again: {g:?}"
            );
            assert_eq!(g.allocated, g.consumed + g.surrendered, "{g:?}");
        }
        for grant in self.grants.values() {
            assert_eq!(
                grant.allocated,
                grant.available()
                    + grant.reserved
                    + grant.consumed
                    + grant.surrendered
                    + grant.unknown,
                "units are conserved: {grant:?}"
            );
            let held = |units: RunUnits| {
                self.journal
                    .values()
                    .filter(|(run, name)| {
                        run.units == units && name.as_deref() == Some(grant.name.as_str())
                    })
                    .count() as u64
            };
            assert_eq!(grant.reserved, held(RunUnits::Reserved), "{grant:?}");
            assert_eq!(grant.unknown, held(RunUnits::Unknown), "{grant:?}");
            assert_eq!(grant.consumed, held(RunUnits::Consumed), "{grant:?}");
        }
        for (id, (run, _)) in &self.journal {
            // A reserved run is one this incarnation is running: none is left
            // reserved without its dispatch.
            assert_eq!(
                run.is_running(),
                self.running.contains(id) || self.returned.contains_key(id),
                "run {id}: {run:?}"
            );
            if matches!(
                run.units,
                RunUnits::None | RunUnits::Consumed | RunUnits::Released
            ) {
                let first = *self.terminal.entry(*id).or_insert((run.outcome, run.units));
                assert_eq!(
                    first,
                    (run.outcome, run.units),
                    "run {id}: a terminal outcome never changes"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn runs_execute_once_and_units_are_conserved(
        units in [0u8..6, 0u8..6],
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut receiver = Receiver::new(units);
        for op in &ops {
            receiver.step(op);
            receiver.check();
        }
    }
}
