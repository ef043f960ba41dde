//! Signing against AWS's published Signature Version 4 test suite
//! (`aws-sig-v4-test-suite`: `get-vanilla`, `post-vanilla`,
//! `post-x-www-form-urlencoded`; credentials `AKIDEXAMPLE`, region
//! `us-east-1`, service `service`, 2015-08-30T12:36:00Z), and the
//! credential sources.

use super::credentials::{Credentials, parse_time, profile_credentials};
use super::sign_with;
use std::time::{Duration, UNIX_EPOCH};

fn suite_creds() -> Credentials {
    Credentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
        expires: None,
    }
}

fn suite_time() -> std::time::SystemTime {
    parse_time("2015-08-30T12:36:00Z").unwrap()
}

fn authorization(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> String {
    let h = sign_with(&suite_creds(), "us-east-1", "service", method, url, headers, body, suite_time()).unwrap();
    h.into_iter().find(|(k, _)| k.eq_ignore_ascii_case("authorization")).map(|(_, v)| v).unwrap()
}

#[test]
fn the_aws_test_suite_vectors() {
    // get-vanilla.authz
    assert_eq!(
        authorization("GET", "https://example.amazonaws.com/", &[], b""),
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
    // post-vanilla.authz
    assert_eq!(
        authorization("POST", "https://example.amazonaws.com/", &[], b""),
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
    );
}

#[test]
fn temporary_credentials_add_the_session_token() {
    let c = Credentials { session_token: Some("tok".into()), ..suite_creds() };
    let h = sign_with(
        &c,
        "us-east-1",
        "aps",
        "POST",
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
        &[("content-type", "application/x-protobuf")],
        b"x",
        suite_time(),
    )
    .unwrap();
    assert!(h.iter().any(|(k, v)| k.eq_ignore_ascii_case("x-amz-security-token") && v == "tok"), "{h:?}");
    let auth = &h.iter().find(|(k, _)| k.eq_ignore_ascii_case("authorization")).unwrap().1;
    assert!(auth.contains("/us-east-1/aps/aws4_request") && auth.contains("content-type"), "{auth}");
}

#[test]
fn shared_credentials_file_profiles_and_sts_times() {
    let text = "[default]\naws_access_key_id = AKIA1\naws_secret_access_key = s1\n\n[profile gpu]\naws_access_key_id=AKIA2\naws_secret_access_key=s2\naws_session_token=t2\n";
    assert_eq!(profile_credentials(text, "default").unwrap().access_key_id, "AKIA1");
    let g = profile_credentials(text, "gpu").unwrap();
    assert_eq!((g.secret_access_key.as_str(), g.session_token.as_deref()), ("s2", Some("t2")));
    assert!(profile_credentials(text, "none").is_none());
    assert_eq!(parse_time("1970-01-02T00:00:01Z"), Some(UNIX_EPOCH + Duration::from_secs(86_401)));
    assert_eq!(parse_time("2024-02-29T12:00:00.000Z"), Some(UNIX_EPOCH + Duration::from_secs(1_709_208_000)));
}
