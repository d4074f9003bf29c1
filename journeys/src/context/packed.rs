//! Light hosts packed into one gridd (`start-packed`).

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{CONTROL_SOCKET, Context, FAILPOINTS_ENV, HostProcess};
use crate::error::Failure;
use crate::process::{describe_status, die_with_parent, quote_output};
use crate::{HOST_READY_TIMEOUT, POLL_INTERVAL};

impl Context<'_> {
    /// Starts one `gridd --dir … --dir …` running every host of `hosts` (light hosts
    /// packed into one process), registered as the process `name`, and waits until
    /// every host's control socket accepts a connection (within
    /// [`HOST_READY_TIMEOUT`] from the last host's first answer).
    pub fn start_packed(&mut self, name: &str, hosts: &[String]) -> Result<(), Failure> {
        let expected = format!(
            "the {} hosts of `{name}` to start in one gridd",
            hosts.len()
        );
        if self.host_running(name) {
            return Err(Failure::new(expected, "its gridd is still running"));
        }
        let generation = self.hosts.map.get(name).map_or(0, |p| p.generation) + 1;
        let log = self.logs.join(format!("pack-{name}-{generation}.log"));
        let mut command = Command::new(&self.binaries.gridd);
        for host in hosts {
            command.arg("--dir").arg(self.host_dir(host));
        }
        let child = File::create(&log)
            .and_then(|file| {
                command
                    .current_dir(&self.work)
                    .stdin(Stdio::null())
                    .stdout(file.try_clone()?)
                    .stderr(file)
                    .env_remove(FAILPOINTS_ENV);
                die_with_parent(&mut command);
                command.spawn()
            })
            .map_err(|e| Failure::new(expected.clone(), format!("could not start gridd: {e}")))?;
        self.hosts_started += 1;
        self.hosts.map.insert(
            name.to_string(),
            HostProcess {
                child,
                generation,
                log,
                abort_at: Vec::new(),
                exited: None,
                exit_reported: false,
            },
        );
        let started = Instant::now();
        let mut last_progress = Instant::now();
        let mut ready = 0;
        while ready < hosts.len() {
            let socket = self.host_dir(&hosts[ready]).join(CONTROL_SOCKET);
            if UnixStream::connect(&socket).is_ok() {
                ready += 1;
                last_progress = Instant::now();
                continue;
            }
            let process = self.hosts.map.get_mut(name).expect("just started");
            if let Some(status) = process.poll() {
                return Err(Failure::new(
                    expected,
                    format!(
                        "gridd exited ({}) with {ready} hosts ready; it printed: {}",
                        describe_status(&status),
                        quote_output(&process.read_log())
                    ),
                ));
            }
            if last_progress.elapsed() >= HOST_READY_TIMEOUT {
                let log = process.read_log();
                self.hosts.kill(name);
                return Err(Failure::new(
                    format!(
                        "{expected}, each within HOST_READY_TIMEOUT ({} s) of the one before",
                        HOST_READY_TIMEOUT.as_secs()
                    ),
                    format!(
                        "{ready} ready, then none (killed); gridd printed: {}",
                        quote_output(&log)
                    ),
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        let pid = self.hosts.map[name].child.id();
        self.say(format_args!(
            "{} hosts ready in one gridd `{name}` (pid {pid}) after {} ms",
            hosts.len(),
            started.elapsed().as_millis()
        ));
        Ok(())
    }
}
