//! A TCP relay in front of a real server that can cut the connections it carries without
//! closing them: the client's sockets stay open and nothing it sends is answered, as after a
//! failover whose old primary's address went dark, or behind a partition that drops packets.
//! Connections made after the cut reach the server again (the new primary).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The relay; stops when dropped.
pub struct Partition {
    addr: SocketAddr,
    /// Connections accepted before this many cuts are dead.
    cuts: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Partition {
    /// Starts relaying from a loopback port (port 0) to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let cuts = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (c, s) = (cuts.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = s.cancelled() => return,
                };
                let Ok((client, _)) = accepted else { continue };
                let epoch = c.load(Ordering::SeqCst);
                tokio::spawn(carry(client, upstream, epoch, c.clone(), s.clone()));
            }
        });
        Ok(Self { addr, cuts, stop })
    }

    /// A relay in front of the PostgreSQL server of `database_url`, and that URL through it.
    pub async fn database(database_url: &str) -> std::io::Result<(Self, String)> {
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
        let mut url = url::Url::parse(database_url).map_err(|_| invalid("not a URL"))?;
        let host = url.host_str().ok_or_else(|| invalid("no host"))?.to_string();
        let port = url.port().unwrap_or(5432);
        let upstream = tokio::net::lookup_host((host.as_str(), port))
            .await?
            .next()
            .ok_or_else(|| invalid("the host has no address"))?;
        let partition = Self::start(upstream).await?;
        url.set_host(Some("127.0.0.1"))
            .map_err(|_| invalid("cannot set the host"))?;
        url.set_port(Some(partition.addr.port()))
            .map_err(|_| invalid("cannot set the port"))?;
        Ok((partition, url.to_string()))
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every connection open now stops carrying bytes, in both directions, and stays open.
    pub fn cut(&self) {
        self.cuts.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Copies both ways until the connection is cut or either side closes. Once cut, the server
/// side is closed (the old primary's sessions end, and their locks with them) and what the
/// client sends is read and dropped, never answered.
async fn carry(
    client: TcpStream,
    upstream: SocketAddr,
    epoch: u64,
    cuts: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut to_server = vec![0u8; 16 * 1024];
    let mut to_client = vec![0u8; 16 * 1024];
    let mut watch = tokio::time::interval(std::time::Duration::from_millis(20));
    loop {
        if cuts.load(Ordering::SeqCst) > epoch {
            break;
        }
        tokio::select! {
            n = client_read.read(&mut to_server) => match n {
                Ok(0) | Err(_) => return,
                // Read after the cut: dropped, as everything from now on.
                Ok(_) if cuts.load(Ordering::SeqCst) > epoch => break,
                Ok(n) => {
                    if server_write.write_all(&to_server[..n]).await.is_err() {
                        return;
                    }
                }
            },
            n = server_read.read(&mut to_client) => match n {
                Ok(0) | Err(_) => return,
                Ok(_) if cuts.load(Ordering::SeqCst) > epoch => break,
                Ok(n) => {
                    if client_write.write_all(&to_client[..n]).await.is_err() {
                        return;
                    }
                }
            },
            _ = watch.tick() => {}
            _ = stop.cancelled() => return,
        }
    }
    drop((server_read, server_write));
    loop {
        tokio::select! {
            n = client_read.read(&mut to_server) => if matches!(n, Ok(0) | Err(_)) { return },
            _ = stop.cancelled() => return,
        }
    }
}
