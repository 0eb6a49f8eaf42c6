//! When the daemon stops: SIGINT/SIGTERM, or a future a test injects
//! (docs/operations.md, shutdown).

/// Resolves when the process is asked to stop (SIGINT/SIGTERM); injectable for tests.
pub type Shutdown = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// SIGINT/SIGTERM stop the daemon. SIGHUP (sent by some supervisors and on
/// terminal hang-up) would kill the process by default; config reload is not
/// supported, so it is logged and ignored. Handlers are installed at once, not
/// when the future is first polled. Must be called inside the runtime.
pub fn signals() -> Shutdown {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        if let Ok(mut hup) = signal(SignalKind::hangup()) {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    tracing::warn!(target: "changelake::daemon", "SIGHUP ignored: config reload is not supported; restart the daemon to apply a changed config");
                }
            });
        }
        Box::pin(async move {
            match term {
                Ok(mut term) => {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            tracing::info!(target: "changelake::daemon", "shutdown requested: stop fetching, commit open batches");
        })
    }
    #[cfg(not(unix))]
    Box::pin(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!(target: "changelake::daemon", "shutdown requested: stop fetching, commit open batches");
    })
}
