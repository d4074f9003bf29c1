//! [`Records`] in a DynamoDB table (issue 29, SPEC C12): `dynamodb://TABLE` on any
//! server speaking DynamoDB's JSON protocol (`DynamoDB_20120810`): AWS, or `dynalite`
//! in tests. Each record is one item `{k: S, v: B}`; a put is `PutItem` conditional on
//! `attribute_not_exists(k)`, so the first write wins across retries and writers; a
//! get is a strongly consistent `GetItem`. Requests are signed with SigV4 in the
//! `Authorization` header ([`sigv4`]) and sent by the same blocking client as S3's
//! (`ureq`, rustls), each within `REMOTE_REQUEST_TIMEOUT`.
//!
//! Invariants, stated as absences: no put without its condition; no status but 200 read
//! as success, and no error but `ConditionalCheckFailedException` read as "the key
//! holds a value"; no secret in a message or a `Debug` output; no server text quoted
//! past `QUOTED_CHARS_MAX`.

use base64::Engine;
use serde_json::{Value, json};

use super::archive::ArchiveError;
use super::records::{First, Page, Records, within_limits};
use super::s3::AccessKeys;
use crate::limits::{REMOTE_BLOB_BYTES_MAX, REMOTE_LIST_PAGE_MAX};

pub mod dynalite;
pub mod sigv4;

const TARGET_PREFIX: &str = "DynamoDB_20120810.";
/// The attribute names of an item: its key and its value.
const KEY: &str = "k";
const VALUE: &str = "v";

/// Checks a table name as DynamoDB takes it: 3 to 255 letters, digits, `_`, `-`, `.`.
pub fn check_table(name: &str) -> Result<(), String> {
    grid_spec::storage::check_table(name)
}

/// Records in one table.
pub struct DynamoRecords {
    table: String,
    endpoint: String,
    host: String,
    region: String,
    keys: AccessKeys,
    agent: ureq::Agent,
}

impl std::fmt::Debug for DynamoRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoRecords")
            .field("table", &self.table)
            .field("endpoint", &self.endpoint)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// What a request answered: its status and body.
struct Answered {
    status: u16,
    body: Value,
}

impl Answered {
    /// The error type DynamoDB names (`…#ConditionalCheckFailedException` → the part after `#`).
    fn error_type(&self) -> &str {
        let full = self
            .body
            .get("__type")
            .and_then(Value::as_str)
            .unwrap_or("");
        full.rsplit('#').next().unwrap_or(full)
    }
}

impl DynamoRecords {
    /// These records, their server's `https://` certificate checked against `roots`
    /// only (a store's `ca=`).
    pub fn trusting(mut self, roots: &[ureq::tls::Certificate<'static>]) -> DynamoRecords {
        self.agent = super::s3::remote_agent_trusting(roots);
        self
    }

    /// The table `table` on the server at `endpoint` (`http://HOST:PORT` or `https://…`),
    /// signed for `region`. Nothing is sent: [`DynamoRecords::check`] asks the server.
    pub fn new(
        table: &str,
        endpoint: &str,
        region: &str,
        keys: &AccessKeys,
    ) -> Result<DynamoRecords, ArchiveError> {
        let store = format!("dynamodb://{table}");
        let remote = |detail: String| ArchiveError::Remote {
            store: store.clone(),
            detail,
        };
        check_table(table).map_err(remote)?;
        grid_spec::storage::check_endpoint(endpoint).map_err(|e| {
            remote(format!(
                "endpoint `{}`: {e}",
                grid_spec::diagnostic::quoted(endpoint)
            ))
        })?;
        let url: url::Url = endpoint
            .parse()
            .map_err(|e| remote(format!("endpoint: {e}")))?;
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => return Err(remote("the endpoint names no host".to_owned())),
        };
        let agent = super::s3::remote_agent();
        Ok(DynamoRecords {
            table: table.to_owned(),
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            host,
            region: region.to_owned(),
            keys: keys.clone(),
            agent,
        })
    }

    fn remote(&self, detail: String) -> ArchiveError {
        ArchiveError::Remote {
            store: format!("dynamodb://{}", self.table),
            detail,
        }
    }

    fn unexpected(&self, what: &str, answered: &Answered) -> ArchiveError {
        let message = answered
            .body
            .get("message")
            .or_else(|| answered.body.get("Message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        self.remote(format!(
            "{what}: HTTP {} {}{}",
            answered.status,
            grid_spec::diagnostic::quoted(answered.error_type()),
            if message.is_empty() {
                String::new()
            } else {
                format!(": {}", grid_spec::diagnostic::quoted(message))
            }
        ))
    }

    /// The headers and body of the signed request `operation` with `body`, as sent
    /// (tests compare them with another signer's).
    pub fn signed(&self, operation: &str, body: &[u8], amz_date: &str) -> Vec<(String, String)> {
        let target = format!("{TARGET_PREFIX}{operation}");
        let headers = [
            ("content-type", "application/x-amz-json-1.0"),
            ("host", self.host.as_str()),
            ("x-amz-date", amz_date),
            ("x-amz-target", target.as_str()),
        ];
        let authorization = sigv4::authorization(
            &sigv4::Request {
                method: "POST",
                path: "/",
                query: "",
                headers: &headers,
                body,
            },
            amz_date,
            &self.region,
            "dynamodb",
            &self.keys.key,
            self.keys.secret(),
        );
        let mut out: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        out.push(("authorization".to_owned(), authorization));
        out
    }

    /// The request `operation` with the JSON `bytes`, signed now (`host` is the
    /// client's to send).
    pub fn request(
        &self,
        operation: &str,
        bytes: Vec<u8>,
    ) -> Result<ureq::http::Request<Vec<u8>>, ArchiveError> {
        let headers = self.signed(operation, &bytes, &sigv4::amz_date_now());
        headers
            .iter()
            .filter(|(n, _)| n != "host")
            .fold(
                ureq::http::Request::builder()
                    .method("POST")
                    .uri(format!("{}/", self.endpoint)),
                |r, (n, v)| r.header(n.as_str(), v.as_str()),
            )
            .body(bytes)
            .map_err(|e| self.remote(format!("{operation}: {e}")))
    }

    /// Sends `operation` with `body`: its status and JSON answer.
    fn send(&self, operation: &str, body: &Value) -> Result<Answered, ArchiveError> {
        let bytes = serde_json::to_vec(body).map_err(|e| self.remote(e.to_string()))?;
        let request = self.request(operation, bytes)?;
        let mut response = self
            .agent
            .run(request)
            .map_err(|e| self.remote(format!("{operation}: {e}")))?;
        let status = response.status().as_u16();
        let raw = response
            .body_mut()
            .with_config()
            .limit(REMOTE_BLOB_BYTES_MAX)
            .read_to_vec()
            .map_err(|e| self.remote(format!("{operation}: reading the answer: {e}")))?;
        let body = match raw.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&raw).map_err(|e| {
                self.remote(format!(
                    "{operation}: HTTP {status}, an answer that is not JSON ({e}): {}",
                    grid_spec::diagnostic::quoted(&String::from_utf8_lossy(&raw))
                ))
            })?,
        };
        Ok(Answered { status, body })
    }

    /// Creates the table (key `k`, a string; on demand) and waits, bounded, until it is
    /// active. For tests, benchmarks and the docs' recipe: gridd never creates one.
    pub fn create_table(&self) -> Result<(), ArchiveError> {
        let answered = self.send(
            "CreateTable",
            &json!({
                "TableName": self.table,
                "AttributeDefinitions": [{"AttributeName": KEY, "AttributeType": "S"}],
                "KeySchema": [{"AttributeName": KEY, "KeyType": "HASH"}],
                "BillingMode": "PAY_PER_REQUEST",
            }),
        )?;
        if answered.status != 200 && answered.error_type() != "ResourceInUseException" {
            return Err(self.unexpected("CreateTable", &answered));
        }
        for _ in 0..100 {
            if self.describe()? == "ACTIVE" {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(self.remote("CreateTable: the table did not become ACTIVE within 10 s".to_owned()))
    }

    /// The table's status, once its key schema is found to be `k`, a string hash key.
    fn describe(&self) -> Result<String, ArchiveError> {
        let answered = self.send("DescribeTable", &json!({"TableName": self.table}))?;
        if answered.status == 400 && answered.error_type() == "ResourceNotFoundException" {
            return Err(self.remote(format!("table `{}` does not exist", self.table)));
        }
        if answered.status != 200 {
            return Err(self.unexpected("DescribeTable", &answered));
        }
        let table = &answered.body["Table"];
        let schema_ok = table["KeySchema"].as_array().is_some_and(|k| {
            k.len() == 1 && k[0]["AttributeName"] == KEY && k[0]["KeyType"] == "HASH"
        }) && table["AttributeDefinitions"].as_array().is_some_and(|a| {
            a.iter()
                .any(|d| d["AttributeName"] == KEY && d["AttributeType"] == "S")
        });
        if !schema_ok {
            return Err(self.remote(format!(
                "table `{}` is not keyed by `{KEY}` (a string hash key)",
                self.table
            )));
        }
        Ok(table["TableStatus"].as_str().unwrap_or("").to_owned())
    }

    fn delete(&self, key: &str) -> Result<(), ArchiveError> {
        let answered = self.send(
            "DeleteItem",
            &json!({"TableName": self.table, "Key": {KEY: {"S": key}}}),
        )?;
        match answered.status {
            200 => Ok(()),
            _ => Err(self.unexpected("DeleteItem", &answered)),
        }
    }
}

impl Records for DynamoRecords {
    fn put_first(&self, key: &str, value: &[u8]) -> Result<First, ArchiveError> {
        within_limits(key, Some(value))?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        let answered = self.send(
            "PutItem",
            &json!({
                "TableName": self.table,
                "Item": {KEY: {"S": key}, VALUE: {"B": encoded}},
                "ConditionExpression": "attribute_not_exists(#k)",
                "ExpressionAttributeNames": {"#k": KEY},
            }),
        )?;
        match (answered.status, answered.error_type()) {
            (200, _) => Ok(First::Ours),
            (400, "ConditionalCheckFailedException") => match self.get(key)? {
                Some(held) if held == value => Ok(First::Ours),
                Some(held) => Ok(First::Theirs(held)),
                None => Err(self.remote(format!(
                    "PutItem `{}`: the condition found a value, and a consistent read then none (the item was deleted behind Grid's back)",
                    grid_spec::diagnostic::quoted(key)
                ))),
            },
            _ => Err(self.unexpected("PutItem", &answered)),
        }
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        within_limits(key, None)?;
        let answered = self.send(
            "GetItem",
            &json!({"TableName": self.table, "Key": {KEY: {"S": key}}, "ConsistentRead": true}),
        )?;
        if answered.status != 200 {
            return Err(self.unexpected("GetItem", &answered));
        }
        let Some(item) = answered.body.get("Item") else {
            return Ok(None);
        };
        let value = item[VALUE]["B"].as_str().ok_or_else(|| {
            self.remote(format!(
                "GetItem `{}`: an item without a binary `{VALUE}`",
                grid_spec::diagnostic::quoted(key)
            ))
        })?;
        base64::engine::general_purpose::STANDARD
            .decode(value)
            .map(Some)
            .map_err(|e| self.remote(format!("GetItem: `{VALUE}` is not base64: {e}")))
    }

    /// A strongly consistent `Scan` filtered on `begins_with(k, prefix)`, from
    /// `ExclusiveStartKey` `after`; the next page after its `LastEvaluatedKey` (a server
    /// naming the key it was asked to start after again is refused: it would never end).
    fn scan(&self, prefix: &str, after: Option<&str>) -> Result<Page, ArchiveError> {
        within_limits(prefix, None)?;
        let mut body = json!({
            "TableName": self.table,
            "FilterExpression": "begins_with(#k, :prefix)",
            "ExpressionAttributeNames": {"#k": KEY},
            "ExpressionAttributeValues": {":prefix": {"S": prefix}},
            "ConsistentRead": true,
            "Limit": REMOTE_LIST_PAGE_MAX,
        });
        if let Some(after) = after {
            body["ExclusiveStartKey"] = json!({KEY: {"S": after}});
        }
        let answered = self.send("Scan", &body)?;
        if answered.status != 200 {
            return Err(self.unexpected("Scan", &answered));
        }
        let items = answered.body["Items"]
            .as_array()
            .ok_or_else(|| self.remote("Scan: an answer without `Items`".to_owned()))?;
        let mut page = Page::default();
        for item in items {
            let (Some(key), Some(value)) = (item[KEY]["S"].as_str(), item[VALUE]["B"].as_str())
            else {
                return Err(self.remote(format!(
                    "Scan: an item without a string `{KEY}` and a binary `{VALUE}`"
                )));
            };
            if !key.starts_with(prefix) {
                return Err(self.remote(format!(
                    "Scan: an item `{}` the filter excludes",
                    grid_spec::diagnostic::quoted(key)
                )));
            }
            let value = base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|e| self.remote(format!("Scan: `{VALUE}` is not base64: {e}")))?;
            page.records.push((key.to_owned(), value));
        }
        page.next = match answered.body.get("LastEvaluatedKey") {
            None | Some(Value::Null) => None,
            Some(last) => {
                let last = last[KEY]["S"].as_str().ok_or_else(|| {
                    self.remote(format!(
                        "Scan: a `LastEvaluatedKey` without a string `{KEY}`"
                    ))
                })?;
                if after == Some(last) {
                    return Err(self.remote(format!(
                        "Scan: the server named `{}` as where the next page begins again",
                        grid_spec::diagnostic::quoted(last)
                    )));
                }
                Some(last.to_owned())
            }
        };
        Ok(page)
    }

    /// The table exists keyed by `k`, is active, and refuses a second put of a key: a
    /// probe item of its own written twice with different values (the second must find
    /// the first), then deleted.
    fn check(&self) -> Result<(), ArchiveError> {
        let status = self.describe()?;
        if status != "ACTIVE" {
            return Err(self.remote(format!("table `{}` is {status}, not ACTIVE", self.table)));
        }
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| self.remote(format!("no randomness: {e}")))?;
        let probe = format!(".grid-probe/{:016x}", u64::from_be_bytes(nonce));
        let first = self.put_first(&probe, b"first")?;
        let second = self.put_first(&probe, b"second")?;
        self.delete(&probe)?;
        if first != First::Ours || second != First::Theirs(b"first".to_vec()) {
            return Err(self.remote(
                "the server does not keep the first write of a key (a conditional PutItem was not refused): Grid's records would be overwritable there, so it is not used".to_owned(),
            ));
        }
        Ok(())
    }
}
