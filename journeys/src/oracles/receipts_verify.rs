//! **Receipts verify**: every signed receipt of a route verifies offline with its
//! recipients' public keys, there is at least one, and nothing is outstanding once
//! delivery settled (SPEC C4) — as `gridctl inspect receipts ROUTE --verify --json`
//! reports it.
//!
//! Unknown: a receipt `gridctl` could not check is not verified: the oracle requires
//! `"verified": true` and exit status 0, never infers it from the receipts listed.
//!
//! On failure: expected "every receipt of ROUTE to verify offline" (or "nothing
//! outstanding on ROUTE"), observed gridctl's JSON. Used by `expect-receipts`.

use serde_json::Value;

use crate::error::Failure;

/// Checks `gridctl inspect receipts ROUTE --verify --json` (its JSON and exit code);
/// returns the number of receipts.
pub fn check(route: &str, json: &Value, exit_code: Option<i32>) -> Result<usize, Failure> {
    let count = json["receipts"].as_array().map_or(0, Vec::len);
    if json["verified"] != true || exit_code != Some(0) || count == 0 {
        return Err(Failure::new(
            format!("every receipt of {route} to verify offline"),
            json.to_string(),
        ));
    }
    if json["outstanding"]
        .as_object()
        .is_some_and(|o| !o.is_empty())
    {
        return Err(Failure::new(
            format!("nothing outstanding on {route}"),
            json["outstanding"].to_string(),
        ));
    }
    Ok(count)
}
