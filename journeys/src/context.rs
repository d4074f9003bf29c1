//! What a running step sees and does ([`Context`]): the work directory, the `gridd`
//! processes the journey started, and bounded `gridctl` commands. It knows nothing of
//! journey files or step kinds (`crate::runner` runs a parsed journey's steps on it).
//!
//! Layout of the work directory (kept on failure):
//! - `state/` — the `--state` directory every command gets (hosts in `state/hosts/NAME`)
//! - `plans/NAME.kdl` — plans saved by `plan out="NAME"`
//! - `logs/NNN-gridctl.{out,err}` — each command's output; `logs/host-NAME-K.log` — the
//!   K-th `gridd` process of host NAME (stdout and stderr); `logs/peer-NAME-K.log` — the
//!   K-th process of protocol peer NAME ([`crate::peers`]), and `peers/NAME-K.conf` a
//!   broker's config
//!
//! A host whose listen address is a non-loopback IPv4 address runs in a network
//! namespace of its own, on a bridge the journey creates ([`crate::network`]); the
//! namespaces, veths and bridge go when the journey ends, after the hosts are killed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Display;
use std::fs::File;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::disks::Disks;
use crate::error::{Failure, JourneyError, StepFailure};
use crate::network::{self, Network};
use crate::peers::{self, Peers};
use crate::process::{
    CommandOutput, LOG_TAIL_LINES, RunError, describe_status, die_with_parent, quote_output,
    run_bounded, tail, wait_bounded,
};
use crate::{Binaries, HOST_EXIT_TIMEOUT, HOST_READY_TIMEOUT, POLL_INTERVAL, STEP_TIMEOUT};

mod packed;
mod refusal;

/// The environment variable that arms crash points in `gridd`.
pub const FAILPOINTS_ENV: &str = "GRID_FAILPOINTS";
/// How far gridd's retention clock is moved (`advance-clock`).
pub const CLOCK_ENV: &str = "GRID_RETENTION_CLOCK_OFFSET_S";
/// The control socket inside a host's directory.
pub const CONTROL_SOCKET: &str = "control.sock";

/// Everything a running step can see and do.
pub struct Context<'a> {
    binaries: Binaries,
    journey_path: PathBuf,
    journey_dir: PathBuf,
    work: PathBuf,
    state: PathBuf,
    plans: PathBuf,
    logs: PathBuf,
    topology: Option<PathBuf>,
    hosts: Hosts,
    /// Small disks mounted at hosts' directories (`small-disk`); unmounted after the
    /// hosts are killed (declared after `hosts`: dropped after them on a panic).
    disks: Disks,
    /// The protocol peers (`peer start …`); dropped after the hosts, like the network.
    peers: Peers,
    /// Namespaces, veths and the bridge of namespaced hosts. Declared after `hosts`: when
    /// a `Context` is dropped (a panic), the hosts are killed before the network goes.
    net: Network,
    out: &'a mut dyn Write,
    commands: usize,
    hosts_started: usize,
    /// Every story line said so far (for steps that check what an inner step saw).
    said: Vec<String>,
    /// Listeners held by `occupy` until the journey ends.
    held: Vec<std::net::TcpListener>,
    /// Story lines held back while a polling check repeats (`steps::poll`).
    hushed: Option<Vec<String>>,
    /// How far each host's retention clock was moved (`advance-clock`): given to its
    /// gridd as `GRID_RETENTION_CLOCK_OFFSET_S` from its next start on.
    clocks: std::collections::BTreeMap<String, u64>,
    /// A passphrase file given to the next gridd started, as
    /// `--custody-passphrase-file` (`start HOST passphrase=…`), once.
    start_passphrase: Option<PathBuf>,
}

impl<'a> Context<'a> {
    /// A context for the journey `title` read from `journey_path`.
    pub(crate) fn new(
        journey_path: &Path,
        title: &str,
        binaries: &Binaries,
        out: &'a mut dyn Write,
    ) -> Result<Context<'a>, JourneyError> {
        let work = create_work_dir(journey_path)
            .map_err(|e| JourneyError::Setup(format!("cannot create a work directory: {e}")))?;
        let (state, plans, logs) = (work.join("state"), work.join("plans"), work.join("logs"));
        for dir in [&plans, &logs] {
            std::fs::create_dir(dir).map_err(|e| {
                JourneyError::Setup(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let journey_dir = journey_path
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        // Absolute, like the topology paths steps resolve, so the story can shorten them.
        let journey_dir = journey_dir.canonicalize().unwrap_or(journey_dir);
        let peers = Peers::new(&work, &logs, peers::workspace_root(&journey_dir));
        let cx = Context {
            binaries: binaries.clone(),
            journey_path: journey_path.to_path_buf(),
            journey_dir,
            work,
            state,
            plans,
            logs,
            topology: None,
            hosts: Hosts::default(),
            disks: Disks::default(),
            peers,
            net: Network::default(),
            out,
            commands: 0,
            hosts_started: 0,
            said: Vec::new(),
            held: Vec::new(),
            hushed: None,
            clocks: Default::default(),
            start_passphrase: None,
        };
        let _ = writeln!(cx.out, "journey \"{}\" ({})", title, journey_path.display());
        let _ = writeln!(cx.out, "work directory: {}", cx.work.display());
        Ok(cx)
    }

    /// Runs one step (`run`), numbered `number`, written at `line` as `text`: its line
    /// and story, then the hosts' health; a failure names the step.
    pub(crate) fn run_step(
        &mut self,
        (number, line, text): (usize, usize, &str),
        run: impl FnOnce(&mut Context<'a>) -> Result<(), Failure>,
    ) -> Result<(), Box<StepFailure>> {
        let started = Instant::now();
        let _ = writeln!(self.out, "{:>3}. {}", number, indent(text, 5));
        let result = run(self).and_then(|()| self.check_hosts_after_step());
        if let Err(failure) = result {
            return Err(self.step_failure(number, line, text, failure));
        }
        let _ = self.out.flush();
        let elapsed = started.elapsed();
        if elapsed.as_secs_f64() >= 1.0 {
            self.say(format_args!("({:.1} s)", elapsed.as_secs_f64()));
        }
        Ok(())
    }

    /// After the last step (`last`: its number, line and text): a host armed to abort
    /// that never did means the journey did not reach the crash point it claims to test.
    pub(crate) fn check_after_last(
        &mut self,
        last: Option<(usize, usize, &str)>,
    ) -> Result<(), Box<StepFailure>> {
        if let Err(failure) = self.check_armed_hosts_crashed() {
            let (number, line, text) = last.map_or((0, 1, String::new()), |(n, l, t)| {
                (n, l, format!("{t}\n(checked after this last step)"))
            });
            return Err(self.step_failure(number, line, &text, failure));
        }
        Ok(())
    }

    fn step_failure(
        &mut self,
        number: usize,
        line: usize,
        text: &str,
        failure: Failure,
    ) -> Box<StepFailure> {
        let _ = writeln!(self.out, "     FAILED: expected {}", failure.expected);
        let _ = writeln!(
            self.out,
            "             observed {}",
            indent(&failure.observed, 13)
        );
        Box::new(StepFailure {
            journey: self.journey_path.clone(),
            step: number,
            line,
            text: text.to_string(),
            expected: failure.expected,
            observed: failure.observed,
            work_dir: self.work.clone(),
            host_logs: self.host_log_tails() + &self.peers.log_tails(),
        })
    }

    /// Kills every host process and every peer, removes the journey's network
    /// namespaces and hands back the story writer.
    pub(crate) fn finish(mut self) -> &'a mut dyn Write {
        self.hosts.kill_all();
        self.peers.kill_all();
        for line in self
            .net
            .remove()
            .into_iter()
            .chain(self.disks.unmount_all())
        {
            let _ = writeln!(self.out, "{line}");
        }
        let _ = self.out.flush();
        // `Context` has a Drop only through `hosts`, `disks`, `peers` and `net`, so moving
        // `out` out is fine.
        let Context { out, .. } = self;
        out
    }

    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.commands, self.hosts_started)
    }

    pub fn work_dir(&self) -> &Path {
        &self.work
    }

    /// The gridctl binary the journey runs (for steps that run many commands at once).
    pub fn gridctl_path(&self) -> &Path {
        &self.binaries.gridctl
    }

    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    pub fn journey_dir(&self) -> &Path {
        &self.journey_dir
    }

    /// Writes one line of the story under the current step. Paths inside the work
    /// directory read `$WORK/…`.
    pub fn say(&mut self, line: impl Display) {
        let text = line
            .to_string()
            .replace(&*self.work.to_string_lossy(), "$WORK");
        if let Some(hushed) = &mut self.hushed {
            hushed.push(text);
            return;
        }
        let _ = writeln!(self.out, "     {}", indent(&text, 5));
        self.said.push(text);
    }

    /// From now on, story lines are held back (not written, not said) until
    /// [`Context::take_hushed`] or [`Context::unhush`].
    pub(crate) fn hush(&mut self) {
        self.hushed.get_or_insert_with(Vec::new);
    }

    /// The lines held back since the last call; the story stays hushed.
    pub(crate) fn take_hushed(&mut self) -> Vec<String> {
        self.hushed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Ends hushing; returns the lines held back since the last take.
    pub(crate) fn unhush(&mut self) -> Vec<String> {
        self.hushed.take().unwrap_or_default()
    }

    /// Keeps a listener bound until the journey ends (`occupy`).
    pub fn hold(&mut self, listener: std::net::TcpListener) {
        self.held.push(listener);
    }

    /// How many story lines were said so far: a mark for [`Context::said_since`].
    pub fn said_count(&self) -> usize {
        self.said.len()
    }

    /// The story lines said since `mark`, joined.
    pub fn said_since(&self, mark: usize) -> String {
        self.said[mark.min(self.said.len())..].join("\n")
    }

    /// Shortens paths inside the work and journey directories for the story.
    pub fn show_path(&self, path: &Path) -> String {
        if let Ok(rest) = path.strip_prefix(&self.work) {
            return format!("$WORK/{}", rest.display());
        }
        if let Ok(rest) = path.strip_prefix(&self.journey_dir) {
            return rest.display().to_string();
        }
        path.display().to_string()
    }

    // ---- topology and plans ------------------------------------------------------

    pub fn set_topology(&mut self, path: PathBuf) {
        self.topology = Some(path);
    }

    /// The topology file set by the latest `topology` step.
    pub fn topology(&self) -> Result<PathBuf, Failure> {
        self.topology.clone().ok_or_else(|| {
            Failure::new(
                "a topology (add a `topology \"FILE\"` step before this one)",
                "no topology step has run yet",
            )
        })
    }

    /// Where the plan saved as `name` lives.
    pub fn plan_path(&self, name: &str) -> PathBuf {
        self.plans.join(format!("{name}.kdl"))
    }

    // ---- gridctl -----------------------------------------------------------------

    /// Runs `gridctl ARGS… --state STATE` (no `--state` for `gridctl model …`) within [`STEP_TIMEOUT`] (in the work
    /// directory, without failpoints in its environment). A command that cannot start
    /// or does not finish in time fails the step; any exit status is returned.
    pub fn gridctl(&mut self, args: &[OsString]) -> Result<CommandOutput, Failure> {
        self.run_gridctl(args, None)
    }

    /// [`Context::gridctl`] with `GRID_FAILPOINTS=failpoints` (gridctl's own crash
    /// points: an installation transfer's steps).
    pub fn gridctl_armed(
        &mut self,
        args: &[OsString],
        failpoints: &str,
    ) -> Result<CommandOutput, Failure> {
        self.run_gridctl(args, Some(failpoints))
    }

    fn run_gridctl(
        &mut self,
        args: &[OsString],
        failpoints: Option<&str>,
    ) -> Result<CommandOutput, Failure> {
        self.commands += 1;
        let number = self.commands;
        let mut command = gridctl_command(&self.binaries.gridctl, args, &self.state, &self.work);
        if let Some(failpoints) = failpoints {
            command.env(FAILPOINTS_ENV, failpoints);
        }
        let shown = std::iter::once("gridctl".to_string())
            .chain(args.iter().map(|arg| self.show_path(Path::new(arg))))
            .collect::<Vec<_>>()
            .join(" ");
        self.say(format_args!("$ {shown}"));
        let stdout = self.logs.join(format!("{number:03}-gridctl.out"));
        let stderr = self.logs.join(format!("{number:03}-gridctl.err"));
        match run_bounded(command, &stdout, &stderr, STEP_TIMEOUT) {
            Ok(output) => Ok(output),
            Err(RunError::Spawn(error)) => Err(Failure::new(
                format!("`{shown}` to run"),
                format!(
                    "could not start {}: {error}",
                    self.binaries.gridctl.display()
                ),
            )),
            Err(RunError::TimedOut { stdout, stderr }) => Err(Failure::new(
                format!(
                    "`{shown}` to finish within STEP_TIMEOUT ({} s)",
                    STEP_TIMEOUT.as_secs()
                ),
                format!(
                    "still running, killed; stdout: {}; stderr: {}",
                    quote_output(&stdout),
                    quote_output(&stderr)
                ),
            )),
        }
    }

    // ---- hosts -------------------------------------------------------------------

    /// A host's installation directory: `<state>/hosts/NAME` (journeys' topologies do
    /// not set `dir`).
    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.state.join("hosts").join(host)
    }

    /// The host's listen address `IP:PORT`, from its installed `host.toml`.
    pub fn host_listen(&self, host: &str) -> Result<String, Failure> {
        let path = self.host_dir(host).join("host.toml");
        let config = std::fs::read_to_string(&path).map_err(|e| {
            Failure::new(
                format!("host `{host}` installed (reconcile first)"),
                format!("{}: {e}", self.show_path(&path)),
            )
        })?;
        config
            .lines()
            .find_map(|l| l.trim().strip_prefix("listen = "))
            .map(|l| l.trim().trim_matches('"').to_owned())
            .ok_or_else(|| {
                Failure::new(
                    format!("a listen address in {}", self.show_path(&path)),
                    quote_output(&config),
                )
            })
    }

    /// The network namespace the host runs in: for a listen address that is a
    /// non-loopback IPv4 address, placed (with the journey's bridge) the first time it
    /// is asked for; `None` for a loopback address or a host not installed yet.
    pub fn host_namespace(&mut self, host: &str) -> Result<Option<String>, Failure> {
        let Some(ip) = self
            .host_listen(host)
            .ok()
            .and_then(|listen| network::namespaced_ip(&listen))
        else {
            return Ok(self.net.namespace(host).map(|(ns, _)| ns.to_owned()));
        };
        if let Some((namespace, placed)) = self.net.namespace(host) {
            if placed != ip {
                return Err(Failure::new(
                    format!("host `{host}` to keep its address {placed} within the journey"),
                    format!(
                        "host.toml now says {ip}; the harness does not re-address namespace \
                         {namespace}"
                    ),
                ));
            }
            return Ok(Some(namespace.to_owned()));
        }
        for line in self.net.place(host, ip)? {
            self.say(line);
        }
        Ok(self.net.namespace(host).map(|(ns, _)| ns.to_owned()))
    }

    /// The journey's protocol peers (`peer …`, `device …`).
    pub fn peers(&mut self) -> &mut Peers {
        &mut self.peers
    }

    /// The journey's network namespaces, for `partition` and `heal`.
    pub(crate) fn disks(&mut self) -> &mut Disks {
        &mut self.disks
    }

    pub(crate) fn network(&mut self) -> &mut Network {
        &mut self.net
    }

    /// Whether the harness has a live `gridd` for the host.
    pub fn host_running(&mut self, host: &str) -> bool {
        self.hosts
            .map
            .get_mut(host)
            .is_some_and(|process| process.poll().is_none())
    }

    /// Moves `host`'s retention clock `seconds` further; its next start reads it.
    pub fn advance_clock(&mut self, host: &str, seconds: u64) -> u64 {
        let clock = self.clocks.entry(host.to_owned()).or_default();
        *clock = clock.saturating_add(seconds);
        *clock
    }

    /// Starts `gridd --dir HOSTDIR` (with `GRID_FAILPOINTS` when given) and waits until
    /// its control socket accepts a connection, within [`HOST_READY_TIMEOUT`]. The host
    /// must not be running already.
    pub fn start_host(&mut self, host: &str, failpoints: Option<&str>) -> Result<(), Failure> {
        let expected = format!("host `{host}` to start and accept control connections");
        self.start_host_process(host, failpoints)?;
        let socket = self.host_dir(host).join(CONTROL_SOCKET);
        let started = Instant::now();
        loop {
            let process = self.hosts.map.get_mut(host).expect("just started");
            if let Some(status) = process.poll() {
                let log = process.read_log();
                // Armed to abort, it may reach the point by its own work before its
                // socket is seen (a source read at once after the start): that is the
                // crash the step asked for, not a failed start.
                if let Some(point) = process
                    .abort_at
                    .iter()
                    .find(|p| log.contains(&format!("failpoint {p}: aborting")))
                {
                    let point = point.clone();
                    self.say(format_args!(
                        "host {host} reached {point} and aborted before its socket was seen ({})",
                        describe_status(&status)
                    ));
                    return Ok(());
                }
                return Err(Failure::new(
                    expected,
                    format!(
                        "gridd exited ({}) before it was ready; it printed: {}",
                        describe_status(&status),
                        quote_output(&log)
                    ),
                ));
            }
            if UnixStream::connect(&socket).is_ok() {
                break;
            }
            if started.elapsed() >= HOST_READY_TIMEOUT {
                let log = process.read_log();
                self.hosts.kill(host);
                return Err(Failure::new(
                    format!(
                        "{expected} within HOST_READY_TIMEOUT ({} s)",
                        HOST_READY_TIMEOUT.as_secs()
                    ),
                    format!(
                        "{} never accepted a connection (killed); gridd printed: {}",
                        self.show_path(&socket),
                        quote_output(&log)
                    ),
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        let pid = self.hosts.map[host].child.id();
        let armed = failpoints.map_or(String::new(), |f| format!(", {FAILPOINTS_ENV}={f}"));
        let netns = self.net.namespace(host).map_or(String::new(), |(ns, ip)| {
            format!(", {ip} in namespace {ns}")
        });
        self.say(format_args!(
            "host {host} ready (pid {pid}{armed}{netns}) after {} ms",
            started.elapsed().as_millis()
        ));
        Ok(())
    }

    /// Starts the host without failpoints: `None` once it is ready, or `Some(output)`
    /// when gridd exited by itself with a non-zero status before it was ready — a
    /// refusal to start, reported. Anything else (never ready, killed by a signal) is
    /// the failure [`Context::start_host`] reports.
    pub fn start_host_or_refusal(&mut self, host: &str) -> Result<Option<String>, Failure> {
        let failure = match self.start_host(host, None) {
            Ok(()) => return Ok(None),
            Err(failure) => failure,
        };
        if let Some(process) = self.hosts.map.get_mut(host)
            && let Some(status) = process.poll()
            && status.code().is_some_and(|code| code != 0)
        {
            process.exit_reported = true;
            return Ok(Some(process.read_log()));
        }
        Err(failure)
    }

    /// The next gridd started gets `--custody-passphrase-file FILE` (once).
    pub fn set_start_passphrase(&mut self, file: PathBuf) {
        self.start_passphrase = Some(file);
    }

    /// Starts gridd for the host and returns at once (no readiness wait): for steps
    /// that expect gridd to refuse to start. A host with a non-loopback IPv4 listen
    /// address is started as `ip netns exec NS gridd …` in its namespace (`ip` execs
    /// gridd: the child's pid is gridd's, and SIGKILL reaches it).
    pub fn start_host_process(
        &mut self,
        host: &str,
        failpoints: Option<&str>,
    ) -> Result<(), Failure> {
        if self.host_running(host) {
            return Err(Failure::new(
                format!("host `{host}` not to be running before it is started"),
                format!("the harness's gridd for `{host}` is still running (kill it first)"),
            ));
        }
        let namespace = self.host_namespace(host)?;
        let generation = self.hosts.map.get(host).map_or(0, |p| p.generation) + 1;
        let log = self.logs.join(format!("host-{host}-{generation}.log"));
        let passphrase = self.start_passphrase.take();
        let spawn = || -> std::io::Result<Child> {
            let file = File::create(&log)?;
            let mut command = match &namespace {
                Some(namespace) => {
                    let mut command = Command::new("ip");
                    command
                        .args(["netns", "exec", namespace])
                        .arg(&self.binaries.gridd);
                    command
                }
                None => Command::new(&self.binaries.gridd),
            };
            if let Some(file) = &passphrase {
                command.arg("--custody-passphrase-file").arg(file);
            }
            command
                .arg("--dir")
                .arg(self.host_dir(host))
                .current_dir(&self.work)
                .stdin(Stdio::null())
                .stdout(file.try_clone()?)
                .stderr(file);
            match failpoints {
                Some(failpoints) => command.env(FAILPOINTS_ENV, failpoints),
                None => command.env_remove(FAILPOINTS_ENV),
            };
            match self.clocks.get(host) {
                Some(seconds) => command.env(CLOCK_ENV, seconds.to_string()),
                None => command.env_remove(CLOCK_ENV),
            };
            die_with_parent(&mut command);
            command.spawn()
        };
        let child = spawn().map_err(|error| {
            let via = namespace
                .as_ref()
                .map_or(String::new(), |ns| format!("ip netns exec {ns} "));
            Failure::new(
                format!("gridd for host `{host}` to start"),
                format!(
                    "could not start {via}{}: {error}",
                    self.binaries.gridd.display()
                ),
            )
        })?;
        self.hosts_started += 1;
        let abort_at = failpoints.map(aborting_points).unwrap_or_default();
        self.hosts.map.insert(
            host.to_string(),
            HostProcess {
                child,
                generation,
                log,
                abort_at,
                exited: None,
                exit_reported: false,
            },
        );
        Ok(())
    }

    /// Waits for a host process started by [`Context::start_host_process`] to exit,
    /// returning its status and output: within [`HOST_READY_TIMEOUT`], the time a start
    /// may take to decide (a start refused after waiting for an authority, too).
    pub fn wait_host_exit(&mut self, host: &str) -> Result<(ExitStatus, String), Failure> {
        let process = self.hosts.map.get_mut(host).ok_or_else(|| {
            Failure::new(
                format!("a gridd process for host `{host}`"),
                "the harness never started one",
            )
        })?;
        let status = match process.exited {
            Some(status) => Some(status),
            None => wait_bounded(&mut process.child, HOST_READY_TIMEOUT)
                .ok()
                .flatten(),
        };
        match status {
            Some(status) => {
                process.exited = Some(status);
                process.exit_reported = true;
                Ok((status, process.read_log()))
            }
            None => Err(Failure::new(
                format!(
                    "gridd for host `{host}` to exit within HOST_READY_TIMEOUT ({} s)",
                    HOST_READY_TIMEOUT.as_secs()
                ),
                "it is still running",
            )),
        }
    }

    /// SIGKILLs the host's process if it is running and waits for it. Returns how the
    /// process ended and whether this call killed it (`false`: it had already exited).
    pub fn kill_host(&mut self, host: &str) -> Result<(ExitStatus, bool), Failure> {
        let Some(process) = self.hosts.map.get_mut(host) else {
            return Err(Failure::new(
                format!("host `{host}` to have been started by this journey"),
                "the harness never started it",
            ));
        };
        if let Some(status) = process.poll() {
            process.exit_reported = true;
            return Ok((status, false));
        }
        let _ = process.child.kill();
        match wait_bounded(&mut process.child, HOST_EXIT_TIMEOUT) {
            Ok(Some(status)) => {
                process.exited = Some(status);
                process.exit_reported = true;
                Ok((status, true))
            }
            _ => Err(Failure::new(
                format!(
                    "host `{host}` to exit within HOST_EXIT_TIMEOUT ({} s) after SIGKILL",
                    HOST_EXIT_TIMEOUT.as_secs()
                ),
                "it is still running",
            )),
        }
    }

    /// The crash points the host's current process was armed to abort at.
    pub fn host_abort_points(&self, host: &str) -> Vec<String> {
        self.hosts
            .map
            .get(host)
            .map(|p| p.abort_at.clone())
            .unwrap_or_default()
    }

    /// Waits for a host armed to abort to do so (it must, within
    /// [`HOST_EXIT_TIMEOUT`]); reports how it ended.
    pub fn wait_for_armed_crash(&mut self, host: &str) -> Result<(), Failure> {
        let points = self.host_abort_points(host).join(", ");
        let process = self.hosts.map.get_mut(host).expect("armed host exists");
        let status = match process.exited {
            Some(status) => Some(status),
            None => wait_bounded(&mut process.child, HOST_EXIT_TIMEOUT)
                .ok()
                .flatten(),
        };
        let Some(status) = status else {
            return Err(Failure::new(
                format!("host `{host}` to have aborted at {points} (armed by `kill … at=`)"),
                format!(
                    "it is still running {} s later: no step reached the crash point",
                    HOST_EXIT_TIMEOUT.as_secs()
                ),
            ));
        };
        process.exited = Some(status);
        if !process.exit_reported {
            process.exit_reported = true;
            self.say(format_args!(
                "host {host} aborted at {points} ({})",
                describe_status(&status)
            ));
        }
        Ok(())
    }

    /// After each step: a host that exited without being armed to is a failure; one
    /// that was armed and exited is reported once, and so is a peer that exited by
    /// itself.
    fn check_hosts_after_step(&mut self) -> Result<(), Failure> {
        for line in self.peers.exited_by_themselves() {
            self.say(line);
        }
        let mut unexpected = Vec::new();
        let mut crashed = Vec::new();
        for (name, process) in &mut self.hosts.map {
            if process.exit_reported {
                continue;
            }
            let Some(status) = process.poll() else {
                continue;
            };
            process.exit_reported = true;
            if process.abort_at.is_empty() {
                unexpected.push(format!(
                    "host `{name}` exited ({}) — log {}:\n{}",
                    describe_status(&status),
                    process.log.display(),
                    tail(&process.read_log(), LOG_TAIL_LINES)
                ));
            } else {
                crashed.push(format!(
                    "host {name} aborted at {} ({})",
                    process.abort_at.join(", "),
                    describe_status(&status)
                ));
            }
        }
        for line in crashed {
            self.say(line);
        }
        if unexpected.is_empty() {
            Ok(())
        } else {
            Err(Failure::new(
                "every started host without a crash point to keep running",
                unexpected.join("\n"),
            ))
        }
    }

    fn check_armed_hosts_crashed(&mut self) -> Result<(), Failure> {
        let armed: Vec<String> = self
            .hosts
            .map
            .iter()
            .filter(|(_, p)| !p.abort_at.is_empty() && p.exited.is_none())
            .map(|(name, _)| name.clone())
            .collect();
        for host in armed {
            self.wait_for_armed_crash(&host)?;
        }
        Ok(())
    }

    fn host_log_tails(&self) -> String {
        let mut text = String::new();
        for (name, process) in &self.hosts.map {
            let log = process.read_log();
            if log.trim().is_empty() {
                continue;
            }
            text.push_str(&format!(
                "  host {name} (gridd #{}) log, {}:\n",
                process.generation,
                process.log.display()
            ));
            for line in tail(&log, LOG_TAIL_LINES).lines() {
                text.push_str(&format!("    {line}\n"));
            }
        }
        text
    }
}

/// The `gridd` processes a journey started; dropping it kills them all, so no journey
/// leaves a host running — also when a step panics.
#[derive(Default)]
struct Hosts {
    map: BTreeMap<String, HostProcess>,
}

impl Hosts {
    fn kill(&mut self, host: &str) {
        if let Some(process) = self.map.get_mut(host) {
            process.kill();
        }
    }

    fn kill_all(&mut self) {
        for process in self.map.values_mut() {
            process.kill();
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.kill_all();
    }
}

struct HostProcess {
    child: Child,
    /// 1 for the first process of the host in this journey, 2 after a restart, …
    generation: u32,
    log: PathBuf,
    /// The crash points this process was armed to abort at.
    abort_at: Vec<String>,
    exited: Option<ExitStatus>,
    /// Whether the exit was already reported or expected by a step.
    exit_reported: bool,
}

impl HostProcess {
    /// The exit status, if the process has exited.
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    fn kill(&mut self) {
        if self.poll().is_none() {
            let _ = self.child.kill();
            self.exited = wait_bounded(&mut self.child, HOST_EXIT_TIMEOUT)
                .ok()
                .flatten();
        }
    }

    fn read_log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }
}

/// The points of a `GRID_FAILPOINTS` value whose action stops the host: `abort`, and
/// `eio` (an fsync that fails stops the host, which never retries it).
fn aborting_points(failpoints: &str) -> Vec<String> {
    failpoints
        .split(',')
        .filter_map(|item| item.trim().split_once('='))
        .filter(|(_, action)| matches!(action.trim(), "abort" | "eio"))
        .map(|(point, _)| point.trim().to_string())
        .collect()
}

/// A fresh, private directory under the system's temporary directory. Names stay short:
/// the host control sockets live inside it and Unix socket paths are limited to ~108
/// bytes.
fn create_work_dir(journey: &Path) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let stem: String = journey
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(24)
        .collect();
    let base = std::env::temp_dir();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("grid-j-{stem}-{}-{n}", std::process::id()));
        let mut builder = std::fs::DirBuilder::new();
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        match builder.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
}

/// Indents every line after the first by `width` spaces.
fn indent(text: &str, width: usize) -> String {
    text.replace('\n', &format!("\n{}", " ".repeat(width)))
}

/// `gridctl ARGS… --state STATE`, in the work directory, without failpoints in its
/// environment: how every step's command runs (told or quiet).
pub(crate) fn gridctl_command(
    gridctl: &Path,
    args: &[OsString],
    state: &Path,
    work: &Path,
) -> Command {
    let mut command = Command::new(gridctl);
    command.args(args);
    // `gridctl model eval|check|run` work on topology files alone: they take no state
    // directory (`model apply-matrix` asks a host, and does).
    let offline = args.first().is_some_and(|first| first == "model")
        && args.get(1).is_none_or(|second| second != "apply-matrix");
    if !offline {
        command.arg("--state").arg(state);
    }
    command.current_dir(work).env_remove(FAILPOINTS_ENV);
    command
}
