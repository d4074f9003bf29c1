//! The broker side: Debian's `mosquitto` on a free loopback port, with a config the
//! benchmark writes, and `mosquitto_sub` on the edge node's NDATA topic, counting what
//! the broker delivers to a plain subscriber in the same run (the broker's ceiling).

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grid_benches::bringup::locate;
use grid_benches::procs::{Procs, Result, die_with_parent, free_ports};

/// How long mosquitto may take to accept connections, and mosquitto_sub to subscribe.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// `mosquitto` (`$MOSQUITTO_BIN`, else /usr/sbin/mosquitto, else on PATH).
pub fn locate_mosquitto() -> Result<PathBuf> {
    let debian = Path::new("/usr/sbin/mosquitto");
    if std::env::var_os("MOSQUITTO_BIN").is_none() && debian.is_file() {
        return Ok(debian.to_owned());
    }
    locate(
        "MOSQUITTO_BIN",
        "",
        "mosquitto",
        "apt-get install mosquitto mosquitto-clients",
    )
}

/// A running mosquitto.
pub struct Mosquitto {
    pub port: u16,
    pub procs: Procs,
}

impl Mosquitto {
    /// Writes `dir/mosquitto.conf` (one loopback listener, anonymous, no persistence)
    /// and starts `bin` with it.
    pub fn start(bin: &Path, dir: &Path) -> Result<Mosquitto> {
        std::fs::create_dir_all(dir)?;
        let port = free_ports(1)?[0];
        let conf = dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "# Written by benches sources_compare.\nlistener {port} 127.0.0.1\n\
                 allow_anonymous true\npersistence false\nlog_dest stderr\n\
                 log_type error\nlog_type warning\nlog_type notice\n"
            ),
        )?;
        let mut procs = Procs::default();
        let mut command = Command::new(bin);
        command.arg("-c").arg(&conf);
        procs.spawn("mosquitto", command, &dir.join("mosquitto.log"))?;
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            procs.check_running()?;
            if started.elapsed() > READY_TIMEOUT {
                return Err(
                    format!("mosquitto did not listen on {port} in {READY_TIMEOUT:?}").into(),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Mosquitto { port, procs })
    }

    pub fn pid(&self) -> u32 {
        self.procs.pids()[0]
    }

    /// The lines of mosquitto's log that mention dropped messages.
    pub fn dropped_notes(&self, dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("mosquitto.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("dropped"))
            .count()
    }
}

/// What a subscriber received: how many messages, and when the first and last came.
#[derive(Default, Debug, Clone, Copy)]
pub struct Received {
    pub messages: u64,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

/// What `mosquitto_sub -F m` prints for each message (the format has no `%p`: binary
/// payloads cannot split lines).
const MESSAGE_LINE: &str = "m";

/// `stdbuf -oL mosquitto_sub -d -t TOPIC -F m`: one line [`MESSAGE_LINE`] per message,
/// read by a thread that counts them and notes when each came; the debug lines (`-d`)
/// say when the SUBACK came.
pub struct Subscriber {
    child: Child,
    received: Arc<Mutex<Received>>,
    subscribed: Arc<Mutex<bool>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Subscriber {
    pub fn start(bin: &Path, port: u16, topic: &str, log: &Path) -> Result<Subscriber> {
        // Line-buffered (coreutils `stdbuf -oL`): mosquitto_sub's stdio would hold a
        // pipe's output in 4 KiB blocks, so neither the SUBACK nor a message's time
        // would show when it happened.
        let mut command = Command::new("stdbuf");
        command
            .arg("-oL")
            .arg(bin)
            .args(["-d", "-h", "127.0.0.1", "-p", &port.to_string(), "-q", "0"])
            .args(["-i", "grid-bench-sub", "-t", topic, "-F", MESSAGE_LINE])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?);
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let received = Arc::new(Mutex::new(Received::default()));
        let subscribed = Arc::new(Mutex::new(false));
        let reader = {
            let (received, subscribed) = (received.clone(), subscribed.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if line != MESSAGE_LINE {
                        if line.starts_with("Client ") && line.contains("SUBACK") {
                            *subscribed.lock().expect("not poisoned") = true;
                        }
                        continue;
                    }
                    let now = Instant::now();
                    let mut r = received.lock().expect("not poisoned");
                    r.messages += 1;
                    r.first.get_or_insert(now);
                    r.last = Some(now);
                }
            })
        };
        let mut subscriber = Subscriber {
            child,
            received,
            subscribed,
            reader: Some(reader),
        };
        let started = Instant::now();
        while !*subscriber.subscribed.lock().expect("not poisoned") {
            if let Some(status) = subscriber.child.try_wait()? {
                return Err(format!("mosquitto_sub exited ({status})").into());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!("mosquitto_sub had no SUBACK in {READY_TIMEOUT:?}").into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(subscriber)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn received(&self) -> Received {
        *self.received.lock().expect("not poisoned")
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}
