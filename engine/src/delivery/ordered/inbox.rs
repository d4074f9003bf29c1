//! A recipient's [`Inbox`] for one route: what it holds and the cumulative receipt
//! of it (the rules are those of the parent module).

use serde::{Deserialize, Serialize};

use super::{Delivery, DeliveryError, payload_value};
use crate::delivery::receipts::{Class, GENESIS, ReceiptBody, chain};

/// What [`Inbox::accept`] did with a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "accepted", rename_all = "kebab-case")]
pub enum Accepted {
    /// Taken: persist the value and the inbox in one batch, then send the receipt.
    Stored {
        position: u64,
        #[serde(with = "hex::serde")]
        digest: [u8; 32],
    },
    /// Already held (or older than what is held): nothing stored; answer with the
    /// current receipt.
    Duplicate { held: u64 },
    /// Ordered: it does not follow what is held; nothing stored. `expected` is the
    /// earliest position it can take next (`held + 1`); answer with the current
    /// receipt so the publisher resumes after `held`.
    Gap { expected: u64 },
}

/// The recipient side of one route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbox {
    pub(super) route: String,
    pub(super) membership: String,
    pub(super) recipient: String,
    pub(super) class: Class,
    /// The highest position held (0: none).
    pub(super) held: u64,
    /// The chain digest of what is held (Latest: of the one value held).
    #[serde(with = "hex::serde")]
    pub(super) digest: [u8; 32],
}

impl Inbox {
    pub fn new(route: &str, membership: &str, recipient: &str, class: Class) -> Self {
        Inbox {
            route: route.to_owned(),
            membership: membership.to_owned(),
            recipient: recipient.to_owned(),
            class,
            held: 0,
            digest: GENESIS,
        }
    }

    pub fn route(&self) -> &str {
        &self.route
    }

    pub fn recipient(&self) -> &str {
        &self.recipient
    }

    pub fn class(&self) -> Class {
        self.class
    }

    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }

    /// The scalar value a delivery carries, refused unless it is 8 bytes of a finite
    /// `f64` — checked before [`Inbox::accept`] on scalar routes, so nothing
    /// non-finite is captured.
    pub fn value(&self, delivery: &Delivery) -> Result<f64, DeliveryError> {
        payload_value(&self.route, &delivery.payload)
    }

    /// Takes a delivery. Ordered: exactly the value following the held one (its
    /// `previous` is `held`); Latest: any value newer than the held one.
    pub fn accept(&mut self, delivery: &Delivery) -> Accepted {
        if delivery.position <= self.held {
            return Accepted::Duplicate { held: self.held };
        }
        let digest = match self.class {
            Class::Ordered => {
                if delivery.previous != self.held {
                    return Accepted::Gap {
                        expected: self.held + 1,
                    };
                }
                chain(&self.digest, delivery.position, &delivery.payload)
            }
            Class::Latest => chain(&GENESIS, delivery.position, &delivery.payload),
        };
        self.held = delivery.position;
        self.digest = digest;
        Accepted::Stored {
            position: delivery.position,
            digest,
        }
    }

    /// The current cumulative receipt, to sign with the recipient's key. Only ever
    /// sent for a persisted state.
    pub fn receipt(&self) -> ReceiptBody {
        ReceiptBody {
            route: self.route.clone(),
            membership: self.membership.clone(),
            recipient: self.recipient.clone(),
            class: self.class,
            highest_position: self.held,
            digest: self.digest,
        }
    }
}
