//! The local control API's client side: JSON lines over the Unix socket
//! `DIR/control.sock` (0600), served by the composition root (`root::socket`).

use crate::limits::CONTROL_LINE_BYTES_MAX;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::protocol::{Call, Reply};

/// The socket's file name inside the host directory.
pub const CONTROL_SOCKET: &str = "control.sock";

pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(CONTROL_SOCKET)
}

/// A caller's connection to one host.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// Why a call has no reply. `Lost` means the call may or may not have taken effect.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot reach the host at {path}: {source}")]
    Unreachable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the reply was lost ({detail}); the outcome is unknown")]
    Lost { detail: String },
}

impl Client {
    pub fn connect(dir: &Path) -> Result<Client, CallError> {
        let path = socket_path(dir);
        let stream = UnixStream::connect(&path).map_err(|source| CallError::Unreachable {
            path: path.clone(),
            source,
        })?;
        let writer = stream
            .try_clone()
            .map_err(|source| CallError::Unreachable { path, source })?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// Bounds every later send and every wait for a reply on this connection
    /// (`None`: unbounded, the default). A call that runs out of time is
    /// [`CallError::Lost`].
    pub fn set_timeout(&self, timeout: Option<std::time::Duration>) -> std::io::Result<()> {
        self.writer.set_write_timeout(timeout)?;
        self.reader.get_ref().set_read_timeout(timeout)
    }

    /// Sends one call and waits for its reply. Once the call is written, any failure
    /// is [`CallError::Lost`]: the caller must not assume it had no effect.
    pub fn call(&mut self, call: &Call) -> Result<Reply, CallError> {
        let mut line = serde_json::to_vec(call).expect("calls serialize");
        line.push(b'\n');
        self.writer.write_all(&line).map_err(|e| CallError::Lost {
            detail: format!("sending failed: {e}"),
        })?;
        let mut answer = String::new();
        match (&mut self.reader)
            .take(CONTROL_LINE_BYTES_MAX)
            .read_line(&mut answer)
        {
            Ok(0) => Err(CallError::Lost {
                detail: "the host closed the connection before replying".to_owned(),
            }),
            Ok(_) => serde_json::from_str(&answer).map_err(|e| CallError::Lost {
                detail: format!("the reply does not decode: {e}"),
            }),
            Err(e) => Err(CallError::Lost {
                detail: format!("reading the reply failed: {e}"),
            }),
        }
    }
}
