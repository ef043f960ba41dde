#!/usr/bin/env python3
"""A loopback stand-in for Amazon Managed Prometheus and STS that checks
AWS Signature Version 4 by recomputing it with botocore (the AWS SDK for
Python's own signer), independently of the agent's signer.

usage: sigv4_receiver.py PORT REGION TOKEN_FILE_CONTENT

- POST /workspaces/ws-1/api/v1/remote_write: the signature is recomputed
  over the headers the request says it signed, its body and its X-Amz-Date,
  with each known credential set in turn; 200 if one matches (recorded by
  its access key), 403 otherwise.
- POST /sts/: Action=AssumeRoleWithWebIdentity (the WebIdentityToken must
  equal TOKEN_FILE_CONTENT) answers the web-identity credentials;
  Action=AssumeRole must be signed (service sts) by the static credentials
  and answers the role's.
- GET /stats: {"accepted": {access key: count}, "rejected": n, "sts": [actions]}.
"""
import datetime
import json
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

PORT, REGION, TOKEN = int(sys.argv[1]), sys.argv[2], sys.argv[3]
KNOWN = {
    "AKIDSTATIC": Credentials("AKIDSTATIC", "static/secret+key", None),
    "AKIAWEB": Credentials("AKIAWEB", "web-secret", "web-session-token"),
    "AKIAROLE": Credentials("AKIAROLE", "role-secret", "role-session-token"),
}
stats = {"accepted": {}, "rejected": 0, "sts": [], "why": []}


def verify(handler, body, service, region):
    auth = handler.headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return None, "no SigV4 Authorization header"
    parts = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 ") :].split(","))
    key = parts["Credential"].split("/")[0]
    creds = KNOWN.get(key)
    if creds is None:
        return None, f"unknown access key {key}"
    signed = parts["SignedHeaders"].split(";")
    headers = {h: handler.headers.get(h) for h in signed if h != "host"}
    url = f"http://127.0.0.1:{PORT}{handler.path}"
    req = AWSRequest(method=handler.command, url=url, data=body, headers=headers)
    req.context["timestamp"] = handler.headers.get("X-Amz-Date")
    signer = SigV4Auth(creds, service, region)
    canonical = signer.canonical_request(req)
    want = signer.signature(signer.string_to_sign(req, canonical), req)
    if parts["Signature"] != want:
        return None, f"signature mismatch for {key}: canonical request was\n{canonical}"
    if creds.token and handler.headers.get("X-Amz-Security-Token") != creds.token:
        return None, f"{key}: missing or wrong X-Amz-Security-Token"
    return key, ""


def sts_answer(action, c):
    exp = (datetime.datetime.utcnow() + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"<{action}Response><{action}Result><Credentials><AccessKeyId>{c.access_key}</AccessKeyId>"
        f"<SecretAccessKey>{c.secret_key}</SecretAccessKey><SessionToken>{c.token}</SessionToken>"
        f"<Expiration>{exp}</Expiration></Credentials></{action}Result></{action}Response>"
    )


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="text/plain"):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        if self.path == "/stats":
            self.reply(200, json.dumps(stats), "application/json")
        else:
            self.reply(404, "")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.startswith("/sts"):
            form = dict(urllib.parse.parse_qsl(body.decode()))
            action = form.get("Action", "")
            stats["sts"].append(action)
            if action == "AssumeRoleWithWebIdentity":
                if form.get("WebIdentityToken") != TOKEN:
                    return self.reply(400, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>bad token</Message></Error></ErrorResponse>")
                return self.reply(200, sts_answer(action, KNOWN["AKIAWEB"]), "text/xml")
            if action == "AssumeRole":
                key, why = verify(self, body, "sts", REGION)
                if key != "AKIDSTATIC":
                    stats["why"].append(why)
                    return self.reply(403, "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>" + why + "</Message></Error></ErrorResponse>")
                return self.reply(200, sts_answer(action, KNOWN["AKIAROLE"]), "text/xml")
            return self.reply(400, "unknown action")
        if self.path == "/workspaces/ws-1/api/v1/remote_write":
            key, why = verify(self, body, "aps", REGION)
            if key is None:
                stats["rejected"] += 1
                if len(stats["why"]) < 5:
                    stats["why"].append(why)
                return self.reply(403, why)
            stats["accepted"][key] = stats["accepted"].get(key, 0) + 1
            return self.reply(200, "")
        self.reply(404, "")


ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
