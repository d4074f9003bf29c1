//! AWS Signature Version 4 in the `Authorization` header, for DynamoDB's JSON requests
//! (S3's are presigned by `rusty-s3`, which signs only S3 actions). Pure: the caller
//! gives the time. Checked against AWS's documented example and, in the records suite,
//! against botocore signing the same request.

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

type Hmac = hmac::Hmac<Sha256>;

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// One request to sign.
pub struct Request<'a> {
    pub method: &'a str,
    /// The URI path, already canonical (`/`).
    pub path: &'a str,
    /// The query, already canonical (names sorted, values encoded), or empty.
    pub query: &'a str,
    /// Every header to sign, names lower-case (`host` and `x-amz-date` among them).
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// The `Authorization` header's value for `request`, signed at `amz_date`
/// (`YYYYMMDDTHHMMSSZ`) for `region` and `service` with the access key `key` and its
/// `secret`.
pub fn authorization(
    request: &Request<'_>,
    amz_date: &str,
    region: &str,
    service: &str,
    key: &str,
    secret: &str,
) -> String {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(n, v)| {
            let value = v.split_whitespace().collect::<Vec<_>>().join(" ");
            (n.to_ascii_lowercase(), value)
        })
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    let signed = signed.join(";");
    let canonical = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed}\n{}",
        request.method,
        request.path,
        request.query,
        hex::encode(Sha256::digest(request.body))
    );
    let date = &amz_date[..amz_date.len().min(8)];
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    let signature = hex::encode(hmac(&k_signing, to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
}

/// Now, as SigV4 writes it (`YYYYMMDDTHHMMSSZ`, UTC).
pub fn amz_date_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's worked example of the whole signing process (IAM `ListUsers`, in the
    /// General Reference's "Signature Version 4 signing process" examples).
    #[test]
    fn the_documented_example_signs_as_aws_says() {
        let request = Request {
            method: "GET",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            headers: &[
                (
                    "Content-Type",
                    "application/x-www-form-urlencoded; charset=utf-8",
                ),
                ("Host", "iam.amazonaws.com"),
                ("X-Amz-Date", "20150830T123600Z"),
            ],
            body: b"",
        };
        let header = authorization(
            &request,
            "20150830T123600Z",
            "us-east-1",
            "iam",
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        );
        assert_eq!(
            header,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn the_date_is_sixteen_characters_in_utc() {
        let now = amz_date_now();
        assert_eq!(now.len(), 16, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[8] == b'T', "{now}");
    }
}
