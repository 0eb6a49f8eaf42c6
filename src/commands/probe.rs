//! `probe`: exit 0 when an HTTP endpoint answers 200, so container health
//! checks need no curl in the image.

use changelake::error::{Error, Result};

/// GET `url` (plain http), Ok(body) on 200.
pub fn probe(url: &str) -> Result<String> {
    use std::io::{Read, Write};
    let u = url::Url::parse(url).map_err(|e| Error::Usage(format!("probe: `{url}`: {e}")))?;
    if u.scheme() != "http" {
        return Err(Error::Usage(format!("probe: `{url}`: only http:// is supported")));
    }
    let fail = |e: &dyn std::fmt::Display| Error::Input(format!("probe {url}: {e}"));
    let addrs = u.socket_addrs(|| Some(80)).map_err(|e| fail(&e))?;
    let addr = addrs.first().ok_or_else(|| fail(&"no address"))?;
    let timeout = std::time::Duration::from_secs(5);
    let mut s = std::net::TcpStream::connect_timeout(addr, timeout).map_err(|e| fail(&e))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| fail(&e))?;
    let host = u.host_str().unwrap_or("localhost");
    s.write_all(
        format!("GET {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", u.path())
            .as_bytes(),
    )
    .map_err(|e| fail(&e))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| fail(&e))?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(body.to_string())
    } else {
        Err(fail(&format!("{status}: {}", body.trim())))
    }
}
