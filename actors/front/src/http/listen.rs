//! The accept loop of `dsh serve`: at most `--max-connections` connections are open at once (a
//! further client waits in the listen backlog until one closes), and a connection whose next
//! request's headers do not arrive within `--header-timeout-ms` is closed (hyper's timer runs
//! whenever it waits for a request head, so an idle kept-alive connection is closed too), so a
//! client that sends a byte a second, or nothing, holds nothing for long. axum's own `serve` has
//! neither knob, so the loop is here, over hyper's HTTP/1 connection builder (its header timeout,
//! driven by hyper-util's tokio timer). With `--tls-cert` each connection is a TLS one first
//! (`http/tls.rs`), its handshake bounded by the same timeout.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

/// The bounds of the accept loop.
#[derive(Clone, Copy)]
pub struct ConnectionLimits {
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--header-timeout-ms`.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` for ever, over TLS when `tls` is given (`--tls-cert`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    tls: Option<TlsAcceptor>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors, most likely: let some close before trying again.
                tracing::warn!(%err, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Replies are small and written in pieces (headers, then SSE events): with Nagle's
        // algorithm each waited for the client's delayed ACK, 40 ms a call.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%err, "TCP_NODELAY");
        }
        let service = TowerToHyperService::new(router.clone());
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, service, limits).await,
                // The handshake counts against the header timeout: a client that stalls in it
                // holds its permit no longer than one that stalls in its headers.
                Some(tls) => {
                    match tokio::time::timeout(limits.header_timeout, tls.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(stream, service, limits).await,
                        Ok(Err(err)) => tracing::debug!(%err, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(permit);
        });
    }
}

/// Serves HTTP/1 requests on one connection (plain or TLS) until it ends.
async fn serve_connection<I>(io: I, service: TowerToHyperService<Router>, limits: ConnectionLimits)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    if let Err(err) = builder.serve_connection(TokioIo::new(io), service).await {
        tracing::debug!(%err, "connection ended");
    }
}
