//! The trait each capability implements to be served by the transport: the path
//! families it answers (`POST /FAMILY/MEMBERSHIP/WHAT`), the body it accepts, and how
//! it serves a peer the transport has already admitted — a participant certified in
//! the membership the path names. The transport reads no capability's types: it
//! hands bytes in and sends bytes back.

use std::future::Future;
use std::pin::Pin;

/// A request the transport admitted: `POST /{family}/{membership}/{what}` from
/// `peer`, whose certificate was issued by `membership`'s authority.
#[derive(Debug)]
pub struct Inbound {
    pub family: String,
    /// For `POST /control`, which names none in its path, the certificate's.
    pub membership: String,
    pub what: String,
    /// The certified participant calling.
    pub peer: String,
    /// The value of [`Endpoint::header`], when the endpoint reads one and it was sent.
    pub header: Option<String>,
    /// At most [`Endpoint::body_limit`] bytes.
    pub body: Vec<u8>,
}

/// What an endpoint answers.
#[derive(Debug)]
pub enum Outbound {
    /// An HTTP status and a JSON body (no body: no content type).
    Reply { status: u16, body: Vec<u8> },
    /// No reply: the connection closes without one (a failpoint lost it).
    Lost,
}

impl Outbound {
    /// `status` with `reply` as JSON.
    pub fn json<T: serde::Serialize>(status: u16, reply: &T) -> Outbound {
        Outbound::Reply {
            status,
            body: serde_json::to_vec(reply).expect("replies serialize"),
        }
    }

    /// The refusal every endpoint family shares: `{"reply":"refused","reason":…}`.
    pub fn refused(status: u16, reason: impl Into<String>) -> Outbound {
        Outbound::json(
            status,
            &Refused {
                reply: "refused",
                reason: reason.into(),
            },
        )
    }
}

#[derive(serde::Serialize)]
struct Refused {
    reply: &'static str,
    reason: String,
}

/// Decodes a JSON body; the error reads `malformed call: …`.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("malformed call: {e}"))
}

pub type Serving<'a> = Pin<Box<dyn Future<Output = Outbound> + Send + 'a>>;

/// A capability's endpoint. To ensure correctness: `serve` acts only as
/// `inbound.peer` (never as a name in the body), and answers a request it cannot
/// take with a refusal, never by guessing.
pub trait Endpoint: Send + Sync + 'static {
    /// The first path segments this endpoint serves.
    fn families(&self) -> &'static [&'static str];

    /// Whether `POST /{family}/M/{what}` exists (otherwise: 404, no endpoint).
    fn serves(&self, family: &str, what: &str) -> bool;

    /// A request header handed to `serve` with the body.
    fn header(&self) -> Option<&'static str> {
        None
    }

    /// The longest body accepted for `what`, in bytes.
    fn body_limit(&self, family: &str, what: &str) -> usize;

    /// The refusal of a longer body (it names the limit).
    fn too_long(&self, limit: usize) -> String {
        format!("body longer than {limit} bytes")
    }

    fn serve(&self, inbound: Inbound) -> Serving<'_>;
}
