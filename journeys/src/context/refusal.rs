//! A gridd that must refuse to start on a directory no host step names (a transfer's
//! retired source).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{Context, FAILPOINTS_ENV};
use crate::error::Failure;
use crate::process::{describe_status, die_with_parent};
use crate::{HOST_EXIT_TIMEOUT, POLL_INTERVAL};

impl Context<'_> {
    /// Runs `gridd --dir DIR`, which must exit non-zero within [`HOST_EXIT_TIMEOUT`]:
    /// what it printed.
    pub fn start_dir_refusal(&mut self, dir: &Path) -> Result<String, Failure> {
        let expected = format!("a gridd on {} to refuse to start", dir.display());
        self.hosts_started += 1;
        let log = self
            .logs
            .join(format!("refusal-{}.log", self.hosts_started));
        let file = std::fs::File::create(&log)
            .map_err(|e| Failure::new(expected.clone(), format!("{}: {e}", log.display())))?;
        let mut command = Command::new(&self.binaries.gridd);
        command
            .arg("--dir")
            .arg(dir)
            .current_dir(&self.work)
            .stdin(Stdio::null())
            .env_remove(FAILPOINTS_ENV);
        let stderr = file
            .try_clone()
            .map_err(|e| Failure::new(expected.clone(), e.to_string()))?;
        command.stdout(file).stderr(stderr);
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| Failure::new(expected.clone(), format!("could not start gridd: {e}")))?;
        let started = Instant::now();
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break status;
            }
            if started.elapsed() >= HOST_EXIT_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::new(expected, "it kept running (killed)"));
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        let printed = std::fs::read_to_string(&log).unwrap_or_default();
        if status.success() {
            return Err(Failure::new(
                expected,
                format!("it exited {}: {printed}", describe_status(&status)),
            ));
        }
        Ok(printed)
    }
}
