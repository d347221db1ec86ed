//! The accept loop of `dsh serve`: at most `--max-connections` connections are open at once (a
//! further client waits in the listen backlog until one closes), and a connection whose next
//! request's headers do not arrive within `--header-timeout-ms` is closed (hyper's timer runs
//! whenever it waits for a request head, so an idle kept-alive connection is closed too), so a
//! client that sends a byte a second, or nothing, holds nothing for long. axum's own `serve` has
//! neither knob, so the loop is here, over hyper's HTTP/1 connection builder (its header timeout,
//! driven by hyper-util's tokio timer).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The bounds of the accept loop.
#[derive(Clone, Copy)]
pub struct ConnectionLimits {
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--header-timeout-ms`.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` for ever.
pub async fn serve(listener: TcpListener, router: Router, limits: ConnectionLimits) {
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
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            if let Err(err) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%err, "connection ended");
            }
            drop(permit);
        });
    }
}
