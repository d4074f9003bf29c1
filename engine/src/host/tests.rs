//! The model owner on a real store in a temporary directory: generations, defaults and
//! recovery, through the same `handle` calls the control socket makes.

use super::*;
use crate::store::ensure_private_dir;

/// A fresh host installation (no profiles) in a private temporary directory.
struct Installation {
    dir: PathBuf,
}

impl Installation {
    fn new(name: &str) -> Installation {
        Installation::with_profiles(name, Vec::new())
    }

    fn with_profiles(name: &str, profiles: Vec<String>) -> Installation {
        let dir = std::env::temp_dir().join(format!("grid-host-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        let config = HostConfig {
            name: "solo".to_owned(),
            listen: "127.0.0.1:7999".to_owned(),
            profiles,
            metrics: None,
            control_viewers: Vec::new(),
            capacity: Default::default(),
            membership_capacity: Default::default(),
            retain: Default::default(),
            archive: None,
            archive_leaving: None,
            archive_index_leaving: None,
            snapshots: Default::default(),
            storage_claim: None,
            control: None,
        };
        crate::custody::write_private(
            &dir.join(config::HOST_CONFIG_FILE),
            config.to_toml().as_bytes(),
        )
        .unwrap();
        crate::custody::create(&dir).unwrap();
        Installation { dir }
    }

    /// Opens the host, as gridd does; the store fjall created under the test's umask is
    /// made private first (gridd runs with `umask 077`).
    fn open(&self) -> Host {
        privatize(&self.dir);
        Host::open(&self.dir, Failpoints::default()).unwrap()
    }
}

fn privatize(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.is_dir();
    let mode = if dir { 0o700 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if dir {
        for entry in std::fs::read_dir(path).unwrap() {
            privatize(&entry.unwrap().path());
        }
    }
}

impl Drop for Installation {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The canonical text of model `name` declared on host `solo` by `body`.
fn model_text(name: &str, body: &str) -> String {
    let text = format!(
        "grid version=1\nhost solo listen=\"127.0.0.1:7999\"\nmodel {name} host=solo {{\n{body}\n}}\n"
    );
    let topology = grid_spec::load_str("test.kdl", &text).expect("a valid model");
    grid_spec::canonical::model(topology.model(name).unwrap())
}

fn submit(host: &mut Host, op: &str, request: Request) -> Answer {
    match host.handle(Call::Submit {
        op: op.to_owned(),
        request,
    }) {
        Handled::Reply(Reply::Answer(answer)) => answer,
        Handled::Reply(other) => panic!("{op}: expected an answer, got {other:?}"),
        Handled::DropReply => panic!("{op}: no reply"),
    }
}

fn install(host: &mut Host, op: &str, name: &str, body: &str) -> Answer {
    let answer = submit(
        host,
        op,
        Request::InstallModel {
            name: name.to_owned(),
            model: model_text(name, body),
            serves: Vec::new(),
            ceilings: Default::default(),
        },
    );
    assert_eq!(
        answer.outcome,
        Outcome::Succeeded,
        "{op}: {}",
        answer.detail
    );
    answer
}

fn input(host: &mut Host, op: &str, model: &str, values: &[(&str, f64)]) {
    let answer = submit(
        host,
        op,
        Request::Input {
            model: model.to_owned(),
            values: values.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect(),
            fence: None,
        },
    );
    assert_eq!(
        answer.outcome,
        Outcome::Succeeded,
        "{op}: {}",
        answer.detail
    );
}

/// `name = value` of every input and cell of `model`, numbers only.
fn values(host: &mut Host, model: &str) -> BTreeMap<String, f64> {
    match host.handle(Call::Values {
        model: model.to_owned(),
    }) {
        Handled::Reply(Reply::Values { values, .. }) => values
            .into_iter()
            .filter_map(|(n, v)| match v {
                ValueText::Number(x) => Some((n, x)),
                ValueText::Error(_) => None,
            })
            .collect(),
        Handled::Reply(other) => panic!("expected values, got {other:?}"),
        Handled::DropReply => panic!("no reply"),
    }
}

fn state(host: &Host, model: &str) -> ModelState {
    host.observe()
        .models
        .into_iter()
        .find(|m| m.name == model)
        .expect("the model is installed")
}

/// The bug: an input no batch ever set kept its old default in the new generation
/// (`factor = 2` after `default=2` became `default=3`), and the next plan was empty.
#[test]
fn an_input_no_batch_set_takes_the_new_default_and_keeps_it_after_recovery() {
    let installation = Installation::new("defaults");
    let mut host = installation.open();
    install(
        &mut host,
        "i1",
        "pump",
        "input flow default=1\ninput factor default=2\ninput offset default=5\ncell power \"flow * factor + offset\"",
    );
    input(&mut host, "b1", "pump", &[("flow", 10.0)]);
    install(
        &mut host,
        "i2",
        "pump",
        "input flow default=1\ninput factor default=3\ninput offset default=6\ncell power \"flow * factor + offset\"",
    );
    let now = values(&mut host, "pump");
    assert_eq!(now["flow"], 10.0, "set by a batch: carried over");
    assert_eq!(now["factor"], 3.0, "never set: the new default");
    assert_eq!(now["offset"], 6.0, "never set: the new default");
    assert_eq!(now["power"], 36.0);
    // A later generation still knows `flow` was set by a batch (it was carried), and
    // `factor` was not.
    install(
        &mut host,
        "i3",
        "pump",
        "input flow default=2\ninput factor default=4\ninput offset default=6\ncell power \"flow * factor + offset\"",
    );
    assert_eq!(values(&mut host, "pump")["flow"], 10.0);
    assert_eq!(values(&mut host, "pump")["factor"], 4.0);
    let before = values(&mut host, "pump");
    let batches = state(&host, "pump").batches;
    drop(host);
    let mut host = installation.open();
    assert_eq!(
        values(&mut host, "pump"),
        before,
        "recovery replays the same state"
    );
    assert_eq!(state(&host, "pump").batches, batches);
}

/// A model admitted to memberships (`serve M`) keeps them in its record: admitting it
/// to another is no new generation, its values and batches stay, and a reopen reads
/// them back.
#[test]
fn admitting_a_model_to_a_membership_is_its_record_not_a_new_generation() {
    let installation = Installation::with_profiles("serves", vec!["shared-memberships".to_owned()]);
    let mut host = installation.open();
    let body = "input flow default=1\ncell twice \"flow * 2\"";
    install(&mut host, "i1", "pump", body);
    input(&mut host, "b1", "pump", &[("flow", 10.0)]);
    let admit = |serves: &[&str]| Request::InstallModel {
        name: "pump".to_owned(),
        model: model_text("pump", body),
        serves: serves.iter().map(|m| (*m).to_owned()).collect(),
        ceilings: Default::default(),
    };
    let answer = submit(&mut host, "i2", admit(&["ops"]));
    assert_eq!(answer.outcome, Outcome::Succeeded, "{}", answer.detail);
    assert_eq!(
        answer.detail,
        "model pump serves ops (generation 1 unchanged)"
    );
    let answer = submit(&mut host, "i3", admit(&["ops"]));
    assert!(
        answer.detail.contains("already installed"),
        "{}",
        answer.detail
    );
    let held = state(&host, "pump");
    assert_eq!((held.generation, held.batches), (1, 1));
    assert_eq!(held.serves, vec!["ops".to_owned()]);
    assert_eq!(values(&mut host, "pump")["twice"], 20.0);
    drop(host);
    let mut host = installation.open();
    assert_eq!(state(&host, "pump").serves, vec!["ops".to_owned()]);
    // A new definition keeps what the request names.
    let answer = submit(
        &mut host,
        "i4",
        Request::InstallModel {
            name: "pump".to_owned(),
            model: model_text("pump", "input flow default=1\ncell twice \"flow * 3\""),
            serves: vec!["ops".to_owned(), "util".to_owned()],
            ceilings: Default::default(),
        },
    );
    assert_eq!(answer.outcome, Outcome::Succeeded, "{}", answer.detail);
    let held = state(&host, "pump");
    assert_eq!(held.generation, 2);
    assert_eq!(held.serves, vec!["ops".to_owned(), "util".to_owned()]);
    assert_eq!(values(&mut host, "pump")["twice"], 30.0);
}

/// A host without `shared-memberships` refuses a model serving two memberships by name
/// and changes nothing; serving one is taken.
#[test]
fn serving_two_memberships_without_the_profile_is_refused_by_name() {
    let installation = Installation::new("serves-two");
    let mut host = installation.open();
    let body = "input flow default=1\ncell twice \"flow * 2\"";
    install(&mut host, "i1", "pump", body);
    let answer = submit(
        &mut host,
        "i2",
        Request::InstallModel {
            name: "pump".to_owned(),
            model: model_text("pump", body),
            serves: vec!["ops".to_owned(), "util".to_owned()],
            ceilings: Default::default(),
        },
    );
    assert_eq!(answer.outcome, Outcome::Failed);
    assert_eq!(
        answer.detail,
        "model `pump` would serve ops and util: one model serving several memberships needs the `shared-memberships` profile, which host `solo` does not select"
    );
    assert!(state(&host, "pump").serves.is_empty(), "nothing changed");
}

/// The host admits a model to each membership it serves only within that membership's
/// models ceiling as the install carries it (`MEMBERSHIP_MODELS_CEILING_DEFAULT` for a
/// membership it does not name), re-checking what `check` checked; a refusal changes
/// nothing.
#[test]
fn a_model_above_a_memberships_models_ceiling_is_refused_by_name() {
    let installation =
        Installation::with_profiles("models-ceiling", vec!["shared-memberships".to_owned()]);
    let mut host = installation.open();
    // 199 counted operations under the model's own ceiling 256.
    let text = format!(
        "grid version=1\nhost solo listen=\"127.0.0.1:7999\"\nmodel pump host=solo ceiling=256 {{\ninput n default=1\ncell total \"{}\"\n}}\n",
        vec!["n"; 100].join(" + ")
    );
    let topology = grid_spec::load_str("test.kdl", &text).expect("a valid model");
    let text = grid_spec::canonical::model(topology.model("pump").unwrap());
    let admit = |ceilings: &[(&str, u32)]| Request::InstallModel {
        name: "pump".to_owned(),
        model: text.clone(),
        serves: vec!["ops".to_owned(), "util".to_owned()],
        ceilings: ceilings
            .iter()
            .map(|(m, c)| ((*m).to_owned(), *c))
            .collect(),
    };
    let answer = submit(&mut host, "i1", admit(&[("ops", 4096)]));
    assert_eq!(answer.outcome, Outcome::Failed);
    assert_eq!(
        answer.detail,
        "model `pump` counts 199 operations: it may not serve membership `util`, above its models ceiling 128 (MEMBERSHIP_MODELS_CEILING_DEFAULT: it declares no `models ceiling=N`)"
    );
    let answer = submit(&mut host, "i2", admit(&[("ops", 4096), ("util", 198)]));
    assert_eq!(
        answer.detail,
        "model `pump` counts 199 operations: it may not serve membership `util`, above its models ceiling 198"
    );
    assert!(!host.models.contains_key("pump"), "nothing installed");
    let answer = submit(&mut host, "i3", admit(&[("ops", 4096), ("util", 199)]));
    assert_eq!(answer.outcome, Outcome::Succeeded, "{}", answer.detail);
    assert_eq!(
        state(&host, "pump").serves,
        vec!["ops".to_owned(), "util".to_owned()]
    );
}

/// An input a batch set keeps its value even when it equals the old default, and even
/// when it equals the new default it stays "set" for the generations after.
#[test]
fn an_input_a_batch_set_keeps_its_value_whatever_the_defaults() {
    let installation = Installation::new("set-inputs");
    let mut host = installation.open();
    install(&mut host, "i1", "m", "input x default=2\ncell y \"x * 10\"");
    input(&mut host, "b1", "m", &[("x", 2.0)]);
    install(&mut host, "i2", "m", "input x default=3\ncell y \"x * 10\"");
    assert_eq!(values(&mut host, "m")["x"], 2.0, "set to 2 by a batch");
    install(&mut host, "i3", "m", "input x default=2\ncell y \"x * 10\"");
    install(&mut host, "i4", "m", "input x default=4\ncell y \"x * 10\"");
    assert_eq!(values(&mut host, "m")["x"], 2.0);
    drop(host);
    let mut host = installation.open();
    assert_eq!(values(&mut host, "m")["x"], 2.0);
    assert_eq!(values(&mut host, "m")["y"], 20.0);
}

/// The host store's key layout (docs/host-store.md) is a disk format: these are
/// the bytes stores written before `store::keys` existed hold.
#[test]
fn store_keys_keep_their_bytes() {
    assert_eq!(
        batch_key("m", 2, 3),
        [b"m\0".as_slice(), &2u32.to_be_bytes(), &3u64.to_be_bytes()].concat()
    );
    assert_eq!(
        batch_prefix("m", 2),
        [b"m\0".as_slice(), &2u32.to_be_bytes()].concat()
    );
    assert_eq!(
        observation_key("t", 9),
        [b"t\0".as_slice(), &9u64.to_be_bytes()].concat()
    );
    assert_eq!(observation_prefix("t"), b"t\0");
    assert_eq!(tag_fed_key("m", "t"), b"tag-fed\0m\0t");
    assert_eq!(fed_key("m", "r"), b"fed\0m\0r");
}

/// A new generation recomputes once, as one journaled batch (batch 1 of the
/// generation): recovery replays it exactly once, never twice, and the generation
/// after continues from it.
#[test]
fn a_new_generation_is_one_recompute_batch_replayed_once() {
    let installation = Installation::new("recompute");
    let mut host = installation.open();
    install(&mut host, "i1", "m", "input x default=1\ncell y \"x * 10\"");
    assert_eq!(
        state(&host, "m").batches,
        0,
        "a first generation has no batch"
    );
    input(&mut host, "b1", "m", &[("x", 4.0)]);
    input(&mut host, "b2", "m", &[("x", 5.0)]);
    let answer = install(
        &mut host,
        "i2",
        "m",
        "input x default=1\ncell y \"x * 100\"",
    );
    assert_eq!(answer.detail, "installed model m generation 2");
    let m = state(&host, "m");
    assert_eq!(
        (m.generation, m.batches),
        (2, 1),
        "the recompute is batch 1"
    );
    assert_eq!(values(&mut host, "m")["y"], 500.0);
    // The same text again is no new generation and no batch.
    let again = install(
        &mut host,
        "i3",
        "m",
        "input x default=1\ncell y \"x * 100\"",
    );
    assert_eq!(again.detail, "model m already installed (generation 2)");
    drop(host);
    let mut host = installation.open();
    let m = state(&host, "m");
    assert_eq!(
        (m.generation, m.batches),
        (2, 1),
        "replayed once, not twice"
    );
    assert_eq!(values(&mut host, "m")["y"], 500.0);
    input(&mut host, "b3", "m", &[("x", 6.0)]);
    assert_eq!(state(&host, "m").batches, 2);
    drop(host);
    let mut host = installation.open();
    assert_eq!(values(&mut host, "m")["y"], 600.0);
    assert_eq!(state(&host, "m").batches, 2);
}

/// A checkpoint of one generation is never applied to the next: a new generation
/// replays from its own batch 1 until its own checkpoint, which then purges every
/// batch of the earlier generation too; an input no batch of the new generation set
/// keeps its new default through the checkpoint.
#[test]
fn a_checkpoint_belongs_to_its_generation_and_purges_the_earlier_ones() {
    let installation = Installation::new("checkpoint-generations");
    let mut host = installation.open();
    install(
        &mut host,
        "i1",
        "m",
        "input x default=1\ninput z default=7\ncell y \"x * 10 + z\"",
    );
    for (i, x) in [4.0, 5.0, 6.0].into_iter().enumerate() {
        input(&mut host, &format!("b{i}"), "m", &[("x", x)]);
    }
    let answer = submit(&mut host, "c1", Request::Checkpoint {});
    assert_eq!(
        answer.detail,
        "checkpointed model m at batch 3 (3 batches purged)"
    );
    input(&mut host, "b9", "m", &[("x", 8.0)]); // batch 4: past the checkpoint
    // Generation 2: x carried (a batch set it), z takes its new default.
    install(
        &mut host,
        "i2",
        "m",
        "input x default=1\ninput z default=9\ncell y \"x * 100 + z\"",
    );
    input(&mut host, "b3", "m", &[("x", 2.0)]);
    drop(host);
    let mut host = installation.open();
    let m = state(&host, "m");
    assert_eq!(
        (m.generation, m.batches),
        (2, 2),
        "its recompute and one input"
    );
    assert_eq!(values(&mut host, "m")["y"], 209.0);
    let answer = submit(&mut host, "c2", Request::Checkpoint {});
    assert_eq!(
        answer.detail,
        "checkpointed model m at batch 2 (3 batches purged)"
    );
    let prefix = Key::text("m").sep().bytes();
    assert_eq!(
        host.batches.prefix(&prefix).count(),
        0,
        "no batch of either generation is left"
    );
    drop(host);
    let mut host = installation.open();
    assert_eq!(values(&mut host, "m")["y"], 209.0);
    assert_eq!(values(&mut host, "m")["z"], 9.0);
    input(&mut host, "b4", "m", &[("z", 1.0)]);
    assert_eq!(state(&host, "m").batches, 3);
    drop(host);
    let mut host = installation.open();
    assert_eq!(values(&mut host, "m")["y"], 201.0);
}

/// The store names the gridd that serves it: `gridd.pid` (0600) holds this process's
/// id once the store's lock is held; a second open of the same store is refused as
/// "served", never as a bare storage error.
#[test]
fn a_second_open_of_a_served_store_says_it_is_served() {
    use std::os::unix::fs::PermissionsExt;
    let installation = Installation::new("served");
    let host = installation.open();
    let pid_file = installation.dir.join(pid::PID_FILE);
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        std::process::id().to_string()
    );
    let mode = std::fs::metadata(&pid_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    privatize(&installation.dir);
    let error = match Host::open(&installation.dir, Failpoints::default()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a second open of a locked store succeeded"),
    };
    assert!(
        error.contains("another gridd serves this installation"),
        "{error}"
    );
    // The pid names this very process: not reported (it is not "another" gridd).
    assert!(!error.contains("(pid "), "{error}");
    assert!(!error.contains("FjallError"), "{error}");
    drop(host);
    pid::remove(&installation.dir);
    assert!(!pid_file.exists());
}

/// Retiring a tag stops its reading and keeps its journal, also across a restart;
/// installing it again reinstates it; retiring twice answers "already retired".
#[test]
fn a_retired_tag_reads_no_more_keeps_its_journal_and_can_be_reinstated() {
    let installation = Installation::with_profiles("retire-tag", vec!["sources".to_owned()]);
    let mut host = installation.open();
    let text = "grid version=1\nhost solo listen=\"127.0.0.1:7999\"\ntag wave host=solo { simulate wave=sine period-s=10 min=0 max=1 seed=1 interval-ms=10; }\n";
    let topology = grid_spec::load_str("t.kdl", text).unwrap();
    let canonical = grid_spec::canonical::tag(&topology.tags[0]).unwrap();
    let install = Request::InstallTag {
        name: "wave".to_owned(),
        tag: canonical,
    };
    assert_eq!(
        submit(&mut host, "i1", install.clone()).outcome,
        Outcome::Succeeded
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while host.tag_states()[0].observations < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no observation sampled"
        );
        std::thread::sleep(host.sample_tags());
    }
    let retire = || Request::RetireTag {
        name: "wave".to_owned(),
    };
    let answer = submit(&mut host, "r1", retire());
    assert_eq!(
        (answer.outcome, answer.detail.as_str()),
        (Outcome::Succeeded, "retired")
    );
    let journaled = host.tag_states()[0].observations;
    assert!(host.tag_states()[0].retired);
    std::thread::sleep(std::time::Duration::from_millis(50));
    host.sample_tags();
    assert_eq!(
        host.tag_states()[0].observations,
        journaled,
        "a retired tag sampled"
    );
    let again = submit(&mut host, "r2", retire());
    assert_eq!(again.detail, "tag wave already retired");
    drop(host);
    pid::remove(&installation.dir);

    let mut host = installation.open();
    let state = host.tag_states().remove(0);
    assert!(state.retired, "retirement is durable");
    assert_eq!(state.observations, journaled, "the journal is kept");
    std::thread::sleep(std::time::Duration::from_millis(50));
    host.sample_tags();
    assert_eq!(host.tag_states()[0].observations, journaled);
    let reinstated = submit(&mut host, "i2", install);
    assert_eq!(reinstated.outcome, Outcome::Succeeded);
    assert!(
        reinstated.detail.starts_with("reinstated tag wave"),
        "{}",
        reinstated.detail
    );
    assert!(!host.tag_states()[0].retired);
    let missing = submit(
        &mut host,
        "r3",
        Request::RetireTag {
            name: "nothing".to_owned(),
        },
    );
    assert_eq!(missing.outcome, Outcome::Failed);
    drop(host);
    pid::remove(&installation.dir);
}

/// A `name` changed in host.toml is refused as a rename, naming the host the
/// installation belongs to — not reported as a damaged store.
#[test]
fn a_renamed_host_toml_is_refused_naming_the_installations_host() {
    let installation = Installation::new("renamed");
    drop(installation.open());
    let path = installation.dir.join(config::HOST_CONFIG_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("name = \"solo\"", "name = \"other\"")).unwrap();
    privatize(&installation.dir);
    let error = match Host::open(&installation.dir, Failpoints::default()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a renamed installation opened"),
    };
    assert!(
        error.contains("this installation belongs to host `solo`, but host.toml names `other`"),
        "{error}"
    );
    assert!(!error.contains("damaged"), "{error}");
    std::fs::write(&path, text).unwrap();
    privatize(&installation.dir);
    drop(installation.open());
}

/// A store whose files were damaged on disk is refused with what failed and what the
/// operator can do, never fjall's Debug text alone, and is never started afresh.
#[test]
fn a_damaged_store_is_refused_in_words_an_operator_can_act_on() {
    let installation = Installation::new("damaged");
    drop(installation.open());
    // Every file fjall wrote, overwritten with garbage of its own length.
    let mut files = Vec::new();
    let mut stack = vec![installation.dir.join("store")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n != "lock") {
                files.push(path);
            }
        }
    }
    assert!(!files.is_empty());
    for file in &files {
        let len = std::fs::metadata(file).unwrap().len() as usize;
        std::fs::write(file, vec![0xA5u8; len.max(64)]).unwrap();
    }
    privatize(&installation.dir);
    let error = match Host::open(&installation.dir, Failpoints::default()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a damaged store opened"),
    };
    assert!(error.contains("the host store failed"), "{error}");
    assert!(
        error.contains("restore this directory from a backup"),
        "{error}"
    );
    assert!(!error.starts_with("FjallError"), "{error}");
}

/// A tag's journal is purged below what every model fed by it projected and its
/// newest good entry: counts stay exact, recent reads answer, purged indexes are
/// refused as purged (never as unknown), and after a reopen the sampler continues
/// after the last index — none generated twice.
#[test]
fn a_tag_journal_is_purged_below_what_its_models_projected_and_continues_after_a_reopen() {
    let installation = Installation::with_profiles("purge-tag", vec!["sources".to_owned()]);
    let mut host = installation.open();
    let text = "grid version=1\nhost solo listen=\"127.0.0.1:7999\"\n\
        tag wave host=solo { simulate wave=sine period-s=10 min=0 max=1 seed=1 interval-ms=10; }\n\
        model m host=solo {\n    input x default=0 from=\"tag:wave\"\n    cell y \"x * 2\"\n}\n";
    let topology = grid_spec::load_str("t.kdl", text).unwrap();
    let tag = grid_spec::canonical::tag(&topology.tags[0]).unwrap();
    let model = grid_spec::canonical::model(topology.model("m").unwrap());
    let answer = submit(
        &mut host,
        "i1",
        Request::InstallTag {
            name: "wave".to_owned(),
            tag,
        },
    );
    assert_eq!(answer.outcome, Outcome::Succeeded, "{}", answer.detail);
    let answer = submit(
        &mut host,
        "i2",
        Request::InstallModel {
            name: "m".to_owned(),
            model,
            serves: Vec::new(),
            ceilings: Default::default(),
        },
    );
    assert_eq!(answer.outcome, Outcome::Succeeded, "{}", answer.detail);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while host.tag_states()[0].observations < 200 {
        assert!(std::time::Instant::now() < deadline, "too few observations");
        std::thread::sleep(host.sample_tags());
    }
    let last = host.tag_states()[0].observations;
    let before = match host.tag_report("wave") {
        Reply::Tag(report) => report,
        other => panic!("{other:?}"),
    };
    assert_eq!(before.held_from, 1);
    assert_eq!(before.counts.good, last);

    let answer = submit(&mut host, "k1", Request::Checkpoint {});
    let purged = format!(
        "tag wave: {} journal entries purged (held from {last})",
        last - 1
    );
    assert!(answer.detail.contains(&purged), "{}", answer.detail);
    let report = match host.tag_report("wave") {
        Reply::Tag(report) => report,
        other => panic!("{other:?}"),
    };
    assert_eq!(report.held_from, last);
    assert_eq!(report.counts, before.counts, "counts stay exact");
    assert_eq!(report.last_good, before.last_good);
    assert!(report.consecutive, "held entries run consecutively");
    let refused = host.tag_read("wave", Some(1)).unwrap_err();
    assert!(refused.contains("was purged"), "{refused}");
    let newest = host.tag_read("wave", None).unwrap();
    assert_eq!(newest["index"], last);
    assert_eq!(newest["models"][0]["model"], "m", "its effect is kept");
    let y = values(&mut host, "m")["y"];
    // Nothing more to purge: the same answer for a new id says so.
    let again = submit(&mut host, "k2", Request::Checkpoint {});
    assert!(!again.detail.contains("tag wave"), "{}", again.detail);
    drop(host);
    pid::remove(&installation.dir);

    let mut host = installation.open();
    assert_eq!(
        host.tag_states()[0].observations,
        last,
        "recovered after a purge"
    );
    assert_eq!(values(&mut host, "m")["y"], y);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while host.tag_states()[0].observations < last + 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "not sampled after reopen"
        );
        std::thread::sleep(host.sample_tags());
    }
    let report = match host.tag_report("wave") {
        Reply::Tag(report) => report,
        other => panic!("{other:?}"),
    };
    assert!(
        report.consecutive,
        "indexes continue after the last, none twice"
    );
    assert_eq!(report.counts.good, report.last_index);
    drop(host);
    pid::remove(&installation.dir);
}

/// A storage replacement's copy is judged as gridd judges its store at start: another
/// format, no store at all, another installation's store and a copy behind what was
/// acknowledged are refused by name; the host's own copy is installed under
/// generation 2, answers as before, and the store it replaced is fenced.
#[test]
fn a_replacement_copy_is_judged_as_a_store_and_its_predecessor_is_fenced() {
    use crate::store::replace as store_replace;
    let cp = |from: &Path, to: &Path| {
        let _ = std::fs::remove_dir_all(to);
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(ok.success());
    };
    let installation = Installation::new("replace");
    let dir = installation.dir.clone();
    let mut host = installation.open();
    install(&mut host, "i1", "m", "input x default=0\ncell y \"x * 2\"");
    input(&mut host, "b1", "m", &[("x", 1.0)]);
    drop(host);
    let behind = dir.with_extension("behind");
    cp(&dir.join("store"), &behind);
    let mut host = installation.open();
    input(&mut host, "b2", "m", &[("x", 2.0)]);
    drop(host);
    let copy = dir.with_extension("copy");
    cp(&dir.join("store"), &copy);

    let judge = |staged: &Path| replace::judge_copy(&dir, staged, 2);
    let format = dir.with_extension("format");
    cp(&copy, &format);
    {
        let database = fjall::Database::builder(&format).open().unwrap();
        let meta = database
            .keyspace("meta", crate::store::keyspace_options)
            .unwrap();
        meta.insert("format", "grid-host-store/0").unwrap();
        database.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let e = judge(&format).unwrap_err();
    assert!(
        e.contains("store format `grid-host-store/0`, which this gridd does not read (it reads `grid-host-store/1`)"),
        "{e}"
    );
    let empty = dir.with_extension("empty");
    let _ = std::fs::remove_dir_all(&empty);
    std::fs::create_dir_all(&empty).unwrap();
    let e = judge(&empty).unwrap_err();
    assert!(e.contains("not a host's store"), "{e}");
    let other = Installation::new("replace-other");
    drop(other.open());
    let e = judge(&other.dir.join("store")).unwrap_err();
    assert!(e.contains("another store"), "{e}");
    let e = judge(&behind).unwrap_err();
    assert!(e.contains("store rolled back"), "{e}");

    let replaced = store_replace::replace(
        &dir,
        &copy,
        "r1",
        |_| false,
        |staged, generation| replace::judge_copy(&dir, staged, generation),
        &Failpoints::default(),
    )
    .unwrap();
    assert_eq!(
        (replaced.record.replaced, replaced.record.generation),
        (1, 2)
    );
    let mut host = installation.open();
    assert_eq!(values(&mut host, "m")["y"], 4.0);
    drop(host);
    std::fs::rename(dir.join("store"), dir.with_extension("generation-2")).unwrap();
    std::fs::rename(dir.join("replaced/store.1"), dir.join("store")).unwrap();
    privatize(&dir);
    let error = match Host::open(&dir, Failpoints::default()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a replaced store opened"),
    };
    assert!(
        error.contains("fenced: storage generation 1 was replaced by 2 (op r1"),
        "{error}"
    );
    for path in [
        behind,
        copy,
        format,
        empty,
        dir.with_extension("generation-2"),
    ] {
        let _ = std::fs::remove_dir_all(path);
    }
}

/// A model with a matrix installs and takes input batches on a host; its matrix reads
/// `#N/A` (this build delivers no mapping yet), a batch naming the matrix is refused
/// changing nothing, and a reopen replays the same state.
#[test]
fn a_model_reading_a_matrix_installs_and_refuses_a_batch_naming_the_matrix() {
    let installation = Installation::new("matrix");
    let mut host = installation.open();
    let text = "grid version=1\nhost solo listen=\"127.0.0.1:7999\"\nmodel cost host=solo {\n    input hour default=0\n    matrix tariff rows=24 cols=7 from=\"mapping:tariffs\"\n    cell price \"tariff[hour, 0] * 1.2\"\n    cell next \"hour + 1\"\n}\n";
    let options = grid_spec::Options {
        references: false,
        ..grid_spec::Options::default()
    };
    let topology = grid_spec::load_str_with("t.kdl", text, options).unwrap();
    let answer = submit(
        &mut host,
        "i1",
        Request::InstallModel {
            name: "cost".to_owned(),
            model: grid_spec::canonical::model(topology.model("cost").unwrap()),
            serves: Vec::new(),
            ceilings: Default::default(),
        },
    );
    assert_eq!(answer.outcome, Outcome::Succeeded, "{}", answer.detail);
    input(&mut host, "b1", "cost", &[("hour", 3.0)]);
    let refused = submit(
        &mut host,
        "b2",
        Request::Input {
            model: "cost".to_owned(),
            values: vec![("tariff".to_owned(), 1.0)],
            fence: None,
        },
    );
    assert_eq!(refused.outcome, Outcome::Failed, "{}", refused.detail);
    assert!(
        refused.detail.contains("`tariff` is a matrix"),
        "{}",
        refused.detail
    );
    let now = values(&mut host, "cost");
    assert_eq!(
        now,
        BTreeMap::from([("hour".to_owned(), 3.0), ("next".to_owned(), 4.0)])
    );
    drop(host);
    let mut host = installation.open();
    assert_eq!(
        values(&mut host, "cost"),
        now,
        "recovery replays the same state"
    );
}
