//! Where a host keeps what it archives (docs/storage.md, "Adapters"): `archive "file"`
//! (the installation's own `DIR/archive`, the default) or `archive "s3://BUCKET/PREFIX"
//! endpoint=… region=… credentials=…` (objects on an S3-compatible server). Parsed and
//! checked here, so `gridctl check` and gridd read one shape; the engine's
//! `store::s3` speaks to the server.

use std::path::PathBuf;

/// The region a request is signed for when `archive` names none.
pub const S3_REGION_DEFAULT: &str = "us-east-1";

/// A host's `archive`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ArchiveTarget {
    /// `archive "file"` (or no `archive`): segments in `DIR/archive`.
    #[default]
    File,
    /// `archive "s3://…"`: segments sealed to the host, as objects under a prefix.
    S3(S3Archive),
    /// `archive "dynamodb://TABLE"`: the index of archived answers by id in a DynamoDB
    /// table (first answer wins); segments in `DIR/archive`, or in a bucket its
    /// `segments "s3://…"` child names.
    DynamoDb(DynamoArchive),
}

/// `archive "dynamodb://TABLE" endpoint="http(s)://HOST:PORT" [region=R]
/// credentials=PATH [{ segments "s3://BUCKET/PREFIX" endpoint=… credentials=… }]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoArchive {
    pub table: String,
    pub endpoint: String,
    pub region: String,
    pub credentials: PathBuf,
    /// `ca=PATH`: a PEM file of the certificate authorities an `https://` endpoint's
    /// certificate is checked against, instead of Mozilla's roots.
    pub ca: Option<PathBuf>,
    /// Where the segments live (none: `DIR/archive`).
    pub segments: Option<S3Archive>,
}

/// `archive "s3://BUCKET/PREFIX" endpoint="http(s)://HOST:PORT" [region=R]
/// credentials=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Archive {
    pub location: S3Location,
    /// `http://HOST:PORT` or `https://HOST[:PORT]`, no path, user info or query.
    pub endpoint: String,
    pub region: String,
    /// An AWS shared-credentials file (relative paths are the host directory's),
    /// private (0600): never a secret in the topology.
    pub credentials: PathBuf,
    /// `ca=PATH`: a PEM file of the certificate authorities an `https://` endpoint's
    /// certificate is checked against, instead of Mozilla's roots.
    pub ca: Option<PathBuf>,
}

impl ArchiveTarget {
    /// `file`, or the `s3://` or `dynamodb://` address (a table's segments apart).
    pub fn url(&self) -> String {
        match self {
            ArchiveTarget::File => "file".to_owned(),
            ArchiveTarget::S3(s3) => s3.location.to_string(),
            ArchiveTarget::DynamoDb(d) => format!("dynamodb://{}", d.table),
        }
    }
}

/// Checks an S3 endpoint: an `http://` or `https://` URL with a host and nothing after
/// it but an optional `/`. The reason, as the end of a sentence, when it is not.
pub fn check_endpoint(text: &str) -> Result<(), String> {
    let url = url::Url::parse(text).map_err(|e| format!("it does not parse ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{}://` is neither http:// nor https://",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("it names no host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("it has user info (`…@`): keys belong in the credentials file".to_owned());
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(
            "it has a path, query or fragment: an endpoint is SCHEME://HOST[:PORT]".to_owned(),
        );
    }
    Ok(())
}

/// Checks a DynamoDB table name: 3 to 255 letters, digits, `_`, `-` and `.`.
pub fn check_table(name: &str) -> Result<(), String> {
    let ok = (3..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    match ok {
        true => Ok(()),
        false => Err(format!(
            "table `{}`: a DynamoDB table name is 3 to 255 letters, digits, `_`, `-` and `.`",
            crate::diagnostic::quoted(name)
        )),
    }
}

/// Checks a region name: 1 to 32 lower-case letters, digits and `-`.
pub fn check_region(text: &str) -> Result<(), String> {
    if (1..=32).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        Ok(())
    } else {
        Err(
            "a region is 1 to 32 lower-case letters, digits and `-` (for example us-east-1)"
                .to_owned(),
        )
    }
}

/// Where blobs live on S3: a bucket and a key prefix (empty, or ending in `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    pub prefix: String,
}

impl S3Location {
    /// Parses `s3://BUCKET[/PREFIX]`. A bucket name is 3 to 63 lower-case letters,
    /// digits, `-` and `.`, starting and ending with a letter or digit; a prefix is
    /// `/`-separated parts of letters, digits, `-`, `_` and `.`, none empty, `.` or `..`.
    pub fn parse(url: &str) -> Result<S3Location, String> {
        let shown = crate::diagnostic::quoted(url);
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("`{shown}` is not an s3:// address"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let edge_ok =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !(3..=63).contains(&bucket.len())
            || !bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            || !edge_ok(bucket.chars().next())
            || !edge_ok(bucket.chars().last())
        {
            return Err(format!(
                "`{shown}`: a bucket name is 3 to 63 lower-case letters, digits, `-` and `.`, starting and ending with a letter or digit"
            ));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty()
            && prefix.split('/').any(|part| {
                part.is_empty()
                    || part == "."
                    || part == ".."
                    || !part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            })
        {
            return Err(format!(
                "`{shown}`: a prefix is `/`-separated parts of letters, digits, `-`, `_` and `.` (none empty, `.` or `..`)"
            ));
        }
        Ok(S3Location {
            bucket: bucket.to_owned(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        })
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "s3://{}/{}",
            self.bucket,
            self.prefix.trim_end_matches('/')
        )
    }
}
