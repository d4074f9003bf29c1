//! Each kind's transitions as data: a topology and an observation in, plan lines out
//! (`check(files, world, expect)`). No host, no socket: the diff is pure.

use std::collections::BTreeMap;
use std::path::PathBuf;

use grid_engine::authority::claims::{Claim, ClaimState};
use grid_engine::authority::service::{AuthorityReply, VoterStatus};
use grid_engine::custody::Manifest;
use grid_engine::custody::membership::{AuthorityRecord, Enrollment};
use grid_engine::host::config::HostConfig;
use grid_engine::processes::api::GrantView;
use grid_engine::protocol::{ModelState, Observation, TagState};
use grid_spec::Topology;

use crate::observe::{
    EnrollmentView, HostObservation, HostStatus, Keys, MembershipObservation, World,
};
use crate::plan::from_world;

const STATE: &str = "/nonexistent/grid-state";

/// Two hosts sharing a membership with an authority: a model on each, a simulated
/// tag, an encrypted Ordered route from edge-a to site-b, and a grant.
const PLANT: &str = r#"
grid version=1
membership ops {
    authority voters=1
}
host edge-a listen="127.0.0.1:7401" {
    member ops
    profiles transport authority delivery sources processes
}
host site-b listen="127.0.0.1:7402" {
    member ops
    profiles transport authority delivery processes
}
model boiler host=edge-a {
    input temp_c from="tag:boiler-temp"
    cell temp_f "temp_c * 9 / 5 + 32"
    output temp_f route="plant/temp_f"
}
model alarm host=site-b {
    input temp_f from="route:plant/temp_f"
    cell hot "IF(temp_f > 180, 1, 0)"
}
tag boiler-temp host=edge-a {
    simulate wave=sine period-s=60 min=60 max=90 seed=7
}
route "plant/temp_f" membership=ops class=ordered encrypted=#true {
    publisher edge-a
    destination site-b
}
grant edge-a-on-site-b issuer=site-b caller=edge-a units=100
"#;

fn topology(text: &str) -> Topology {
    grid_spec::load_str("plant.kdl", text).expect("the fixture topology is valid")
}

/// The plan's lines without details or ids: `+ model boiler @ edge-a   (after + host
/// edge-a; edge-a must be running)`.
fn lines(topology: &Topology, world: &World) -> Vec<String> {
    let plan = from_world(topology, &[PathBuf::from("plant.kdl")], world);
    // Invariants of every plan: ids are non-empty and unique, `after` names only
    // earlier transitions.
    let mut seen = std::collections::HashSet::new();
    for t in &plan.transitions {
        assert!(!t.id.is_empty(), "{} has no id", t.title());
        for a in &t.after {
            assert!(
                seen.contains(a),
                "{} comes after {a}, not earlier",
                t.title()
            );
        }
        assert!(seen.insert(t.id.clone()), "id {} twice", t.id);
    }
    plan.transitions
        .iter()
        .zip(plan.notes())
        .map(|(t, note)| format!("{}{note}", t.title()))
        .collect()
}

fn check(topology: &Topology, world: &World, expect: &[&str]) {
    let got = lines(topology, world);
    assert_eq!(
        got,
        expect.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        "\ngot:\n{}\n",
        got.join("\n")
    );
}

/// Nothing exists yet: no installation, no membership authority.
fn fresh(topology: &Topology) -> World {
    World {
        state: PathBuf::from(STATE),
        hosts: topology
            .hosts
            .iter()
            .map(|h| {
                HostObservation::missing(
                    &h.name,
                    &crate::observe::host_dir(std::path::Path::new(STATE), &h.name),
                )
            })
            .collect(),
        memberships: topology
            .memberships
            .iter()
            .map(|m| MembershipObservation {
                name: m.name.clone(),
                record: None,
                fingerprint: "absent".to_owned(),
            })
            .collect(),
        index: std::sync::OnceLock::new(),
    }
}

fn manifest(host: &str) -> Manifest {
    Manifest {
        generation: 1,
        signing: format!("ed25519:{host}-signing"),
        mail: format!("x25519:{host}-mail"),
        tls: format!("ed25519:{host}-tls"),
        retired: Vec::new(),
        mail_generation: 1,
        retired_mail: Vec::new(),
        tls_generation: 1,
        retired_tls: Vec::new(),
    }
}

/// Every membership's authority exists, and every host is installed and enrolled,
/// not running.
fn installed(topology: &Topology) -> World {
    let mut world = fresh(topology);
    for m in &mut world.memberships {
        m.record = Some(AuthorityRecord {
            membership: m.name.clone(),
            fingerprint: format!("sha256:{}", m.name),
            next_serial: 3,
            crl_number: 0,
            enrolled: Vec::new(),
            revoked: Vec::new(),
        });
        m.fingerprint = "f".to_owned();
    }
    for o in &mut world.hosts {
        let h = topology.host(&o.name).expect("declared");
        o.config = Some(HostConfig::from_host(h));
        o.keys = Keys::Held(manifest(&h.name));
        o.custody = ("digest".to_owned(), h.memberships.clone());
        o.status = HostStatus::Unreachable {
            reason: "not running (no control socket answers)".to_owned(),
        };
        for m in &h.memberships {
            o.enrollments.insert(
                m.clone(),
                EnrollmentView {
                    enrollment: Some(Enrollment {
                        membership: m.clone(),
                        participant: h.name.clone(),
                        serial: 1,
                        authority: format!("sha256:{m}"),
                        tls: format!("ed25519:{}-tls", h.name),
                        not_after: "2036-01-01T00:00:00Z".to_owned(),
                    }),
                    revocations_current: true,
                    peer_keys: Default::default(),
                },
            );
        }
    }
    world
}

fn empty_observation(host: &str) -> Observation {
    Observation {
        host: host.to_owned(),
        keys: None,
        models: Vec::new(),
        unacknowledged: Vec::new(),
        routes: Vec::new(),
        grants: Vec::new(),
        tags: Vec::new(),
        ledgers: Vec::new(),
        missions: Vec::new(),
        exports: Vec::new(),
        decisions: Vec::new(),
        profiles: None,
        staged: Default::default(),
    }
}

fn status(host: &str, initialized: bool, voters: &[&str], learners: &[&str]) -> VoterStatus {
    VoterStatus {
        membership: "ops".to_owned(),
        participant: host.to_owned(),
        node_id: 1,
        initialized,
        state: if initialized { "leader" } else { "learner" }.to_owned(),
        term: u64::from(initialized),
        leader: None,
        voters: voters.iter().map(|s| s.to_string()).collect(),
        learners: learners.iter().map(|s| s.to_string()).collect(),
        last_log_index: None,
        last_applied: None,
        snapshot: None,
        purged: None,
        vote: None,
        snapshot_files: Vec::new(),
        snapshots_installed: 0,
        snapshot_store: None,
        claims: 0,
    }
}

/// Every host runs and holds nothing yet; the authority is not initialized.
fn running_empty(topology: &Topology) -> World {
    let mut world = installed(topology);
    for o in &mut world.hosts {
        o.status = HostStatus::Running(empty_observation(&o.name));
        o.authority
            .insert("ops".to_owned(), Ok(status(&o.name, false, &[], &[])));
    }
    world
}

/// Every host runs and holds everything the files say.
fn running_full(topology: &Topology) -> World {
    let mut world = installed(topology);
    let route = |at: &str| {
        let plan = from_world(topology, &[], &running_empty(topology));
        let t = plan
            .transitions
            .iter()
            .find(|t| t.kind == "route" && t.host == at)
            .expect("a route line");
        match &t.action {
            crate::plan::Action::Submit {
                request: grid_engine::protocol::Request::InstallRoute { route },
            } => route.clone(),
            other => panic!("not a route install: {other:?}"),
        }
    };
    let routes: BTreeMap<&str, _> = [("edge-a", route("edge-a")), ("site-b", route("site-b"))]
        .into_iter()
        .collect();
    for o in &mut world.hosts {
        let mut observed = empty_observation(&o.name);
        for m in topology.models.iter().filter(|m| m.host == o.name) {
            observed.models.push(ModelState {
                name: m.name.clone(),
                model: grid_spec::canonical::model(m),
                retired: false,
                generation: 1,
                batches: 7,
                serves: m.serves.clone(),
                matrices: Default::default(),
            });
        }
        for t in topology.tags.iter().filter(|t| t.host == o.name) {
            observed.tags.push(TagState {
                name: t.name.clone(),
                tag: grid_spec::canonical::tag(t).expect("simulated"),
                observations: 3,
                debt: 0,
                connection: None,
                retired: false,
            });
        }
        observed.routes.push(routes[o.name.as_str()].clone());
        if o.name == "site-b" {
            observed.grants.push(GrantView {
                name: "edge-a-on-site-b".to_owned(),
                caller: "edge-a".to_owned(),
                allocated: 100,
                reserved: 0,
                consumed: 5,
                surrendered: 0,
                unknown: 0,
                retired: false,
                mailbox: None,
                membership: None,
                issued: Vec::new(),
                settlement: None,
            });
        }
        o.status = HostStatus::Running(observed);
        o.authority.insert(
            "ops".to_owned(),
            Ok(status(&o.name, true, &["edge-a"], &["site-b"])),
        );
    }
    let edge = world.hosts.iter_mut().find(|h| h.name == "edge-a").unwrap();
    edge.claims.insert(
        "route:plant/temp_f".to_owned(),
        Ok(AuthorityReply::Shown {
            claim: Some(Claim {
                name: "route:plant/temp_f".to_owned(),
                owner: "edge-a".to_owned(),
                epoch: 1,
                successor: None,
                state: ClaimState::Held,
            }),
            read_index: 9,
        }),
    );
    world
}

#[test]
fn a_fresh_state_plans_every_stage_with_what_each_waits_for() {
    let t = topology(PLANT);
    check(
        &t,
        &fresh(&t),
        &[
            "+ membership ops @ membership:ops",
            "+ host edge-a @ edge-a",
            "+ model boiler @ edge-a   (after + host edge-a; edge-a must be running)",
            "+ enrollment edge-a in ops @ edge-a   (after + host edge-a, + membership ops)",
            "+ host site-b @ site-b",
            "+ model alarm @ site-b   (after + host site-b; site-b must be running)",
            "+ enrollment site-b in ops @ site-b   (after + host site-b, + membership ops)",
            "+ authority ops @ edge-a   (after + enrollment edge-a in ops; edge-a must be running)",
            "+ learner site-b in ops @ edge-a   (after + enrollment site-b in ops, + authority ops @ edge-a; edge-a, site-b must be running)",
            "+ claim route:plant/temp_f @ edge-a   (after + authority ops @ edge-a; edge-a must be running)",
            "+ route plant/temp_f @ site-b   (after + claim route:plant/temp_f @ edge-a, + enrollment site-b in ops; site-b must be running)",
            "+ route plant/temp_f @ edge-a   (after + enrollment edge-a in ops, + route plant/temp_f @ site-b; edge-a must be running)",
            "+ grant edge-a-on-site-b @ site-b   (after + enrollment site-b in ops, + enrollment edge-a in ops; site-b must be running)",
            "+ tag boiler-temp @ edge-a   (after + host edge-a; edge-a must be running)",
        ],
    );
}

#[test]
fn requests_naming_keys_of_hosts_not_created_yet_are_completed_when_sent() {
    let t = topology(PLANT);
    let plan = from_world(&t, &[], &fresh(&t));
    let route = plan
        .transitions
        .iter()
        .find(|t| t.kind == "route")
        .expect("a route line");
    assert!(
        matches!(route.action, crate::plan::Action::Resolve { .. }),
        "{:?}",
        route.action
    );
    let plan = from_world(&t, &[], &running_empty(&t));
    let route = plan
        .transitions
        .iter()
        .find(|t| t.kind == "route")
        .expect("a route line");
    assert!(matches!(route.action, crate::plan::Action::Submit { .. }));
}

#[test]
fn installed_hosts_that_do_not_run_are_never_guessed() {
    let t = topology(PLANT);
    check(
        &t,
        &installed(&t),
        &[
            "! host edge-a @ edge-a",
            "! host site-b @ site-b",
            "! authority ops @ edge-a",
        ],
    );
}

#[test]
fn running_hosts_holding_nothing_get_every_object_now() {
    let t = topology(PLANT);
    check(
        &t,
        &running_empty(&t),
        &[
            "+ model boiler @ edge-a",
            "+ model alarm @ site-b",
            "+ authority ops @ edge-a",
            "+ learner site-b in ops @ edge-a   (after + authority ops @ edge-a)",
            "+ claim route:plant/temp_f @ edge-a   (after + authority ops @ edge-a)",
            "+ route plant/temp_f @ site-b   (after + claim route:plant/temp_f @ edge-a)",
            "+ route plant/temp_f @ edge-a   (after + route plant/temp_f @ site-b)",
            "+ grant edge-a-on-site-b @ site-b",
            "+ tag boiler-temp @ edge-a",
        ],
    );
}

#[test]
fn owners_holding_everything_plan_nothing() {
    let t = topology(PLANT);
    check(&t, &running_full(&t), &[]);
}

#[test]
fn models_change_retire_and_unmanaged() {
    let t = topology(PLANT);
    let mut world = running_full(&t);
    let edited = PLANT
        .replace("temp_c * 9 / 5 + 32", "temp_c * 1.8 + 32")
        .replace(
            "model alarm host=site-b {",
            "model alarm host=site-b retired=#true {",
        );
    let t2 = topology(&edited);
    check(
        &t2,
        &world,
        &["~ model boiler @ edge-a", "- model alarm @ site-b"],
    );
    let plan = from_world(&t2, &[], &world);
    let text = plan.render();
    assert!(
        text.contains("~ model boiler @ edge-a\n    cell temp_f: \"temp_c * 9 / 5 + 32\" → \"temp_c * 1.8 + 32\"\n"),
        "{text}"
    );
    assert!(
        plan.transitions[0].detail.contains("before:"),
        "JSON keeps the line diff"
    );
    if let HostStatus::Running(o) = &mut world.hosts[0].status {
        o.models.push(ModelState {
            name: "stray".to_owned(),
            model: "model \"stray\" host=\"edge-a\" {\n}\n".to_owned(),
            retired: false,
            generation: 1,
            batches: 0,
            serves: Vec::new(),
            matrices: Default::default(),
        });
    }
    check(&t, &world, &["! model stray @ edge-a"]);
}

#[test]
fn a_model_the_custody_says_was_held_is_never_planned_afresh() {
    let t = topology(PLANT);
    let mut world = running_full(&t);
    if let HostStatus::Running(o) = &mut world.hosts[0].status {
        o.models.retain(|m| m.name != "boiler");
    }
    // A store that never held it: installed.
    assert!(
        lines(&t, &world).contains(&"+ model boiler @ edge-a".to_owned()),
        "{:?}",
        lines(&t, &world)
    );
    // Its custody says it did: the store lost it, and the plan says so instead.
    world.hosts[0].held_models.insert("boiler".to_owned());
    let got = lines(&t, &world);
    assert!(
        got.contains(&"! model boiler @ edge-a".to_owned()),
        "{got:?}"
    );
    assert!(
        !got.iter().any(|l| l.starts_with("+ model boiler")),
        "{got:?}"
    );
    let plan = from_world(&t, &[], &world);
    let lost = plan
        .transitions
        .iter()
        .find(|t| t.kind == "model" && t.name == "boiler")
        .expect("the model's line");
    assert!(lost.detail.contains("held-models"), "{}", lost.detail);
    // A retired model is not asked for.
    let retired = PLANT.replace(
        "model boiler host=edge-a {",
        "model boiler host=edge-a retired=#true {",
    );
    let got = lines(&topology(&retired), &world);
    assert!(!got.iter().any(|l| l.contains("model boiler")), "{got:?}");
}

#[test]
fn an_authority_some_voters_of_which_do_not_run_is_not_guessed() {
    let t = topology(PLANT);
    let mut world = running_empty(&t);
    world.hosts[1].status = HostStatus::Unreachable {
        reason: "not running".to_owned(),
    };
    world.hosts[1].authority.clear();
    check(
        &t,
        &world,
        &[
            "+ model boiler @ edge-a",
            "! host site-b @ site-b",
            "! authority ops @ edge-a",
            "+ tag boiler-temp @ edge-a",
        ],
    );
}

#[test]
fn grants_raise_surrender_and_report_unknown_units() {
    let t = topology(PLANT);
    let world = running_full(&t);
    check(
        &topology(&PLANT.replace("units=100", "units=150")),
        &world,
        &["~ grant edge-a-on-site-b @ site-b"],
    );
    check(
        &topology(&PLANT.replace("units=100", "units=50")),
        &world,
        &["! grant edge-a-on-site-b @ site-b"],
    );
    // Nothing held: the issuer's settlement follows the surrender in the same plan.
    check(
        &topology(&PLANT.replace("units=100", "units=100 retired=#true")),
        &world,
        &[
            "- grant edge-a-on-site-b @ site-b",
            "~ grant edge-a-on-site-b @ site-b   (after - grant edge-a-on-site-b)",
        ],
    );
    // A unit held by an unknown run: surrendered, not settled (a later plan settles).
    let mut held = world.clone();
    if let Some(h) = held.hosts.iter_mut().find(|h| h.name == "site-b")
        && let HostStatus::Running(o) = &mut h.status
    {
        o.grants[0].unknown = 1;
    }
    check(
        &topology(&PLANT.replace("units=100", "units=100 retired=#true")),
        &held,
        &[
            "- grant edge-a-on-site-b @ site-b",
            "! grant edge-a-on-site-b @ site-b",
        ],
    );
}

#[test]
fn a_grant_never_changes_its_membership_and_is_raised_in_it() {
    let t = topology(PLANT);
    let world = running_full(&t);
    // Issued serving any membership; the file now binds it to `ops`: attention, and
    // no raise is planned under the other membership.
    check(
        &topology(&PLANT.replace("units=100", "units=150 membership=ops")),
        &world,
        &["! grant edge-a-on-site-b @ site-b"],
    );
    // Issued serving `ops`: raised in it; the line removed is attention again.
    let mut bound = world.clone();
    if let Some(h) = bound.hosts.iter_mut().find(|h| h.name == "site-b")
        && let HostStatus::Running(o) = &mut h.status
    {
        o.grants[0].membership = Some("ops".to_owned());
    }
    check(
        &topology(&PLANT.replace("units=100", "units=150 membership=ops")),
        &bound,
        &["~ grant edge-a-on-site-b @ site-b"],
    );
    check(
        &topology(&PLANT.replace("units=100", "units=150")),
        &bound,
        &["! grant edge-a-on-site-b @ site-b"],
    );
}

#[test]
fn a_publishing_right_held_by_another_is_attention_not_taken() {
    let t = topology(PLANT);
    let mut world = running_full(&t);
    if let Some(Ok(AuthorityReply::Shown { claim: Some(c), .. })) =
        world.hosts[0].claims.get_mut("route:plant/temp_f")
    {
        c.owner = "site-b".to_owned();
    }
    check(&t, &world, &["! claim route:plant/temp_f @ edge-a"]);
}

#[test]
fn tags_changed_and_without_their_profile() {
    let t = topology(PLANT);
    let world = running_full(&t);
    check(
        &topology(&PLANT.replace("seed=7", "seed=8")),
        &world,
        &["~ tag boiler-temp @ edge-a"],
    );
    let without = PLANT.replace(
        "profiles transport authority delivery sources processes",
        "profiles transport authority delivery processes",
    );
    check(
        &topology(&without),
        &world,
        &["~ host edge-a @ edge-a", "! tag boiler-temp @ edge-a"],
    );
}

#[test]
fn tags_retire_explicitly_reinstate_and_cov_subscriptions_are_named() {
    let t = topology(PLANT);
    let mut world = running_full(&t);
    let retired = topology(&PLANT.replace(
        "tag boiler-temp host=edge-a {",
        "tag boiler-temp host=edge-a retired=#true {",
    ));
    check(&retired, &world, &["- tag boiler-temp @ edge-a"]);
    let plan = from_world(&retired, &[], &world);
    assert!(
        plan.render()
            .contains("- tag boiler-temp @ edge-a: retired=#true in the files (stop reading)"),
        "{}",
        plan.render()
    );
    assert_eq!(
        plan.transitions[0].action,
        crate::plan::Action::Submit {
            request: grid_engine::protocol::Request::RetireTag {
                name: "boiler-temp".to_owned()
            }
        }
    );
    // Held as retired: nothing more; the file un-retiring it reinstates it.
    if let HostStatus::Running(o) = &mut world.hosts[0].status {
        o.tags[0].retired = true;
    }
    check(&retired, &world, &[]);
    check(&t, &world, &["+ tag boiler-temp @ edge-a"]);
    // A retired tag the file no longer declares is not unmanaged: it holds nothing.
    let removed = PLANT.replace("tag boiler-temp host=edge-a {", "tag other host=edge-a {");
    let removed = removed.replace("from=\"tag:boiler-temp\"", "from=\"tag:other\"");
    let plan = from_world(&topology(&removed), &[], &world);
    assert!(
        !plan.render().contains("! tag boiler-temp"),
        "{}",
        plan.render()
    );
}

#[test]
fn a_cov_subscription_is_cancelled_only_by_retiring() {
    let cov = "tag \"zone\" host=\"edge-a\" {\n    bacnet \"127.0.0.1:47900\" device=1001 object=\"analog-input:3\" property=\"present-value\" cov=#true lifetime-s=300\n}\n";
    assert!(crate::sources::holds_cov_subscription(cov));
    let polled = cov.replace(" cov=#true lifetime-s=300", " interval-ms=1000");
    assert!(!crate::sources::holds_cov_subscription(&polled));
    let modbus = "tag \"t\" host=\"h\" {\n    modbus \"127.0.0.1:1\" unit=1 register=holding address=1 type=u16 scale=1 offset=0 interval-ms=500\n}\n";
    assert!(!crate::sources::holds_cov_subscription(modbus));
}

#[test]
fn key_files_in_hex_are_rewritten_as_pem_explicitly() {
    let t = topology(PLANT);
    let mut world = running_full(&t);
    world.hosts[0].hex_keys = vec!["signing.key".to_owned(), "tls.key".to_owned()];
    check(&t, &world, &["~ keys edge-a @ edge-a"]);
    let plan = from_world(&t, &[], &world);
    assert_eq!(
        plan.transitions[0].action,
        crate::plan::Action::RewriteKeysAsPem
    );
    assert!(plan.transitions[0].detail.contains("rewrite as PEM"));
}

#[test]
fn memberships_revoke_and_distribute() {
    let t = topology(&PLANT.replace(
        "authority voters=1\n",
        "authority voters=1\n    revoke stale-host\n",
    ));
    let world = running_full(&topology(PLANT));
    check(
        &t,
        &world,
        &[
            "- participant stale-host @ membership:ops",
            "~ revocations ops at edge-a @ edge-a   (after - participant stale-host)",
            "~ revocations ops at site-b @ site-b   (after - participant stale-host)",
        ],
    );
}

const LEDGER: &str = r#"
grid version=1
host site listen="127.0.0.1:7402" { profiles ledger; }
host hq listen="127.0.0.1:7403"
ledger books host=site {
    account ops currency="EUR"
    account vendor currency="EUR" owner=hq
}
"#;

#[test]
fn ledgers_install_open_retire_and_never_change_an_account() {
    use grid_engine::ledger::api::LedgerDefinition;
    let t = topology(LEDGER);
    check(&t, &running_empty(&t), &["+ ledger books @ site"]);
    let held = |accounts: Vec<grid_engine::ledger::api::AccountDefinition>| {
        let mut world = running_empty(&t);
        for o in &mut world.hosts {
            if let HostStatus::Running(observed) = &mut o.status
                && o.name == "site"
            {
                observed.ledgers.push(LedgerDefinition {
                    name: "books".to_owned(),
                    accounts: accounts.clone(),
                });
                observed.ledgers.push(LedgerDefinition {
                    name: "other".to_owned(),
                    accounts: Vec::new(),
                });
            }
        }
        world
    };
    let ops = crate::ledger::definition(&t.ledgers[0].accounts[0]);
    let vendor = crate::ledger::definition(&t.ledgers[0].accounts[1]);
    // An account added to the files is opened; a ledger only the host keeps is unmanaged.
    check(
        &t,
        &held(vec![ops.clone()]),
        &["+ account books:vendor @ site", "! ledger other @ site"],
    );
    check(
        &t,
        &held(vec![ops.clone(), vendor.clone()]),
        &["! ledger other @ site"],
    );
    // Retired in the files: `~`, once; a changed account or one the files dropped: `!`.
    let retired = topology(&LEDGER.replace("owner=hq", "owner=hq retired=#true"));
    let world = held(vec![ops.clone(), vendor.clone()]);
    check(
        &retired,
        &world,
        &["~ account books:vendor @ site", "! ledger other @ site"],
    );
    let changed = topology(&LEDGER.replace(
        "account ops currency=\"EUR\"",
        "account ops currency=\"USD\"",
    ));
    let extra = grid_engine::ledger::api::AccountDefinition {
        name: "old".to_owned(),
        ..ops.clone()
    };
    check(
        &changed,
        &held(vec![ops, vendor, extra]),
        &[
            "! account books:ops @ site",
            "! account books:old @ site",
            "! ledger other @ site",
        ],
    );
}

#[test]
fn a_ledger_the_custody_says_was_held_is_never_planned_afresh() {
    let t = topology(LEDGER);
    let mut world = running_empty(&t);
    check(&t, &world, &["+ ledger books @ site"]);
    for o in &mut world.hosts {
        if o.name == "site" {
            o.held_ledgers.insert("books".to_owned());
        }
    }
    check(&t, &world, &["! ledger books @ site"]);
    let plan = from_world(&t, &[], &world);
    let lost = plan
        .transitions
        .iter()
        .find(|t| t.kind == "ledger" && t.name == "books")
        .expect("the ledger's line");
    assert!(lost.detail.contains("held-ledgers"), "{}", lost.detail);
}

/// PLANT with both hosts selecting `missions`, and a mission at edge-a signed by site-b.
fn mission_plant(extra: &str) -> String {
    PLANT
        .replace(
            "profiles transport authority delivery sources processes",
            "profiles transport authority delivery sources processes missions",
        )
        .replace(
            "profiles transport authority delivery processes",
            "profiles transport authority delivery processes missions",
        )
        + &format!(
            "mission night host=edge-a units=3 deadline=\"2099-01-01T00:00:00Z\" successor=site-b{extra}\n"
        )
}

fn held_mission(
    state: grid_engine::missions::api::MissionState,
    units: u64,
    unknown: u64,
) -> grid_engine::missions::api::MissionView {
    use grid_engine::missions::api::{MissionTerms, MissionUnits, MissionView};
    let terms = MissionTerms {
        name: "night".to_owned(),
        host: "edge-a".to_owned(),
        units,
        deadline: "2099-01-01T00:00:00Z".to_owned(),
        successor: "site-b".to_owned(),
        issuer: "site-b".to_owned(),
        issuer_address: "127.0.0.1:7402".to_owned(),
        membership: "ops".to_owned(),
        issuer_keys: manifest("site-b"),
        host_keys: manifest("edge-a"),
    };
    MissionView {
        name: "night".to_owned(),
        host: "edge-a".to_owned(),
        state,
        units: MissionUnits {
            allocated: units,
            consumed: 1,
            unknown,
            available: units - 1 - unknown,
            ..MissionUnits::default()
        },
        deadline: terms.deadline.clone(),
        expired: false,
        successor: "site-b".to_owned(),
        issuer: "site-b".to_owned(),
        quiesced: true,
        claim: "mission:night".to_owned(),
        epoch: Some(1),
        reservation: "plan-x-1".to_owned(),
        return_op: None,
        recover_op: None,
        limit: None,
        allocation: None,
        consumption: None,
        settlement: None,
        closure: None,
        recovered: Vec::new(),
        detail: String::new(),
        terms,
    }
}

fn holding(world: &World, view: grid_engine::missions::api::MissionView) -> World {
    let mut world = world.clone();
    if let Some(h) = world.hosts.iter_mut().find(|h| h.name == "edge-a")
        && let HostStatus::Running(o) = &mut h.status
    {
        o.missions.push(view);
    }
    world
}

#[test]
fn missions_reserve_return_and_what_needs_the_operator() {
    use grid_engine::missions::api::MissionState;
    let t = topology(&mission_plant(""));
    let world = running_full(&t);
    check(&t, &world, &["+ mission night @ edge-a"]);
    // Active: nothing until the files say returned=#true; then the return.
    let active = holding(&world, held_mission(MissionState::Active, 3, 0));
    check(&t, &active, &[]);
    let returned = topology(&mission_plant(" returned=#true"));
    check(&returned, &active, &["~ mission night @ edge-a"]);
    // An unknown run: the return waits for its owner's resolution.
    let unknown = holding(&world, held_mission(MissionState::Active, 3, 1));
    check(&returned, &unknown, &["! mission night @ edge-a"]);
    // A reservation whose allocation never arrived, and signed terms changed in the files.
    let reserving = holding(&world, held_mission(MissionState::Reserving, 3, 0));
    check(&t, &reserving, &["! mission night @ edge-a"]);
    let other_units = holding(&world, held_mission(MissionState::Active, 4, 0));
    check(&t, &other_units, &["! mission night @ edge-a"]);
    // Settled: nothing; held and not in the files: unmanaged, never returned.
    let settled = holding(&world, held_mission(MissionState::Settled, 3, 0));
    check(&returned, &settled, &[]);
    let without = mission_plant("");
    let without = without
        .lines()
        .filter(|l| !l.starts_with("mission "))
        .collect::<Vec<_>>()
        .join("\n");
    check(&topology(&without), &settled, &["! mission night @ edge-a"]);
    // A host without the profile: attention, nothing reserved.
    let plain = topology(
        &(PLANT.to_owned()
            + "mission night host=edge-a units=3 deadline=\"2099-01-01T00:00:00Z\" successor=site-b\n"),
    );
    check(&plain, &running_full(&plain), &["! mission night @ edge-a"]);
}

#[test]
fn a_retired_host_is_never_installed_nor_torn_down() {
    let text = format!("{PLANT}host spare listen=\"127.0.0.1:7409\" retired=#true\n");
    let t = topology(&text);
    let got = lines(&t, &fresh(&t));
    assert!(got.iter().any(|l| l == "! host spare @ spare"), "{got:#?}");
    assert!(
        !got.iter().any(|l| l.starts_with("+ host spare")),
        "{got:#?}"
    );
    let plan = from_world(&t, &[PathBuf::from("plant.kdl")], &fresh(&t));
    let spare = plan
        .transitions
        .iter()
        .find(|t| t.title() == "! host spare @ spare")
        .unwrap();
    assert!(
        spare.detail.contains("a retired host is never installed"),
        "{}",
        spare.detail
    );
    // Installed (and not running): kept as it is, never removed by a plan.
    let got = lines(&t, &installed(&t));
    assert!(got.iter().any(|l| l == "! host spare @ spare"), "{got:#?}");
    assert!(!got.iter().any(|l| l.starts_with("- host")), "{got:#?}");
}

#[test]
fn profiles_selected_since_gridd_started_ask_for_a_restart() {
    let t = topology(PLANT);
    let mut world = running_full(&t);
    // Every profile the files select, in their order: nothing to say.
    for o in &mut world.hosts {
        let running = HostConfig::from_host(t.hosts.iter().find(|h| h.name == o.name).unwrap());
        if let HostStatus::Running(observed) = &mut o.status {
            observed.profiles = Some(running.profiles);
        }
    }
    check(&t, &world, &[]);
    // edge-a started before `sources` and `processes` were selected, with `ledger`.
    if let HostStatus::Running(observed) = &mut world.hosts[0].status {
        observed.profiles = Some(
            ["transport", "authority", "delivery", "ledger"]
                .map(str::to_owned)
                .to_vec(),
        );
    }
    check(&t, &world, &["! host edge-a @ edge-a"]);
    let plan = from_world(&t, &[PathBuf::from("plant.kdl")], &world);
    assert_eq!(
        plan.transitions[0].detail,
        "restart gridd to run profiles sources processes and to stop profiles ledger: it runs transport authority delivery ledger (profiles take effect when gridd starts)"
    );
}

#[test]
fn profiles_in_another_order_need_no_restart() {
    let list = |text: &str| -> Vec<String> { text.split(' ').map(str::to_owned).collect() };
    use super::hosts::profiles_differ;
    assert!(!profiles_differ(
        &list("transport processes"),
        &list("processes transport")
    ));
    assert!(profiles_differ(
        &list("transport processes missions"),
        &list("processes transport")
    ));
    assert!(profiles_differ(
        &list("transport"),
        &list("transport ledger")
    ));
}

/// `storage generation=N from=…`: one above the installation's plans the replacement
/// of its stopped host's store with its op id; while the host runs, a generation going
/// back or skipping one, and one without `from` are attention; the installation's own
/// generation plans nothing.
#[test]
fn storage_generations_plan_one_replacement_at_a_time_never_backwards() {
    use crate::plan::Action;
    let storage = |said: &str, at: u64, running: bool| {
        let t = topology(&format!(
            "grid version=1\nhost solo listen=\"127.0.0.1:7001\" {{\n    storage {said}\n}}\n"
        ));
        let mut world = if running {
            running_empty(&t)
        } else {
            installed(&t)
        };
        world.hosts[0].storage_generation = at;
        let plan = from_world(&t, &[], &world);
        plan.transitions
            .into_iter()
            .filter(|t| t.detail.contains("storage") || t.detail.contains("generation"))
            .map(|t| (t.action, t.detail))
            .collect::<Vec<_>>()
    };
    let planned = storage("generation=2 from=\"/mnt/copy\"", 1, false);
    assert_eq!(planned.len(), 1, "{planned:?}");
    assert_eq!(
        planned[0].0,
        Action::ReplaceStorage {
            from: PathBuf::from("/mnt/copy"),
            generation: 2
        }
    );
    assert_eq!(
        planned[0].1,
        "replace storage (generation 1 -> 2) from /mnt/copy"
    );
    assert!(storage("generation=2 from=\"/mnt/copy\"", 2, false).is_empty());
    for (said, at, running, why) in [
        (
            "generation=2 from=\"/mnt/copy\"",
            1,
            true,
            "waits for its gridd to stop",
        ),
        (
            "generation=1 from=\"/mnt/copy\"",
            2,
            false,
            "a generation never goes back",
        ),
        (
            "generation=4 from=\"/mnt/copy\"",
            2,
            false,
            "write `storage generation=3`",
        ),
        ("generation=3", 2, false, "needs `from=\"PATH\"`"),
    ] {
        let planned = storage(said, at, running);
        assert_eq!(planned.len(), 1, "{said}: {planned:?}");
        assert_eq!(planned[0].0, Action::None, "{said}");
        assert!(planned[0].1.contains(why), "{said}: {}", planned[0].1);
    }
}

/// A changed `dir=` plans the transfer with its op id, stopped or running: a running
/// gridd is stopped by the transfer's prepare, and the line says so.
#[test]
fn a_transfer_is_planned_for_a_running_host_saying_its_gridd_stops_first() {
    use crate::plan::Action;
    let t = topology(
        "grid version=1\nhost solo listen=\"127.0.0.1:7001\" dir=\"/srv/new/solo\" {\n}\n",
    );
    for (mut world, stops) in [(installed(&t), false), (running_empty(&t), true)] {
        world.hosts[0].link = None;
        let plan = from_world(&t, &[], &world);
        let transfers: Vec<_> = plan
            .transitions
            .iter()
            .filter(|t| matches!(t.action, Action::Transfer { .. }))
            .collect();
        assert_eq!(transfers.len(), 1, "{:?}", plan.transitions);
        let detail = &transfers[0].detail;
        assert!(detail.starts_with("transfer installation "), "{detail}");
        assert!(detail.contains("-> /srv/new/solo ("), "{detail}");
        assert_eq!(
            detail.contains("its gridd is stopped first"),
            stops,
            "{detail}"
        );
    }
}
