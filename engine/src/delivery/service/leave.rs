//! What this host still owes on the routes of one membership — a leave waits for it
//! (docs/memberships.md, "Leaving"): as a publisher, values a destination has not
//! receipted, publications waiting for capacity or not yet durable; as a destination,
//! the position it holds, which the host compares with what its models took.

use super::{Delivery, Role};

/// The routes of one membership at this host, as a leave sees them.
pub struct RouteObligations {
    /// The publisher's open obligations, by name.
    pub owed: Vec<String>,
    /// (route, highest position held) of every route of it this host receives.
    pub held: Vec<(String, u64)>,
}

impl Delivery {
    pub fn obligations(&self, membership: &str) -> RouteObligations {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let mut owed = Vec::new();
        let mut held = Vec::new();
        for (name, r) in routes
            .iter()
            .filter(|(_, r)| r.install.membership == membership)
        {
            match &r.role {
                Role::Publisher(p) => {
                    for (destination, values) in p.outbox.outstanding() {
                        owed.push(format!(
                            "route `{name}`: {values} value(s) not yet receipted by `{destination}`"
                        ));
                    }
                    if !p.deferred.is_empty() {
                        owed.push(format!(
                            "route `{name}`: {} publication(s) waiting for capacity",
                            p.deferred.len()
                        ));
                    }
                    if !p.pending.is_empty() {
                        owed.push(format!(
                            "route `{name}`: {} publication(s) not yet durable",
                            p.pending.len()
                        ));
                    }
                }
                Role::Destination(inbox) => held.push((name.clone(), inbox.held())),
            }
        }
        RouteObligations { owed, held }
    }
}
