//! A zkCli look-alike: `zkcli [-server host:port] [cmd args...]`.
//!
//! `cargo run -p keel-client --example zkcli -- -server 127.0.0.1:2181 ls /`

use std::io::Write;

#[tokio::main]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut server = "localhost:2181".to_string();
    if args.first().map(String::as_str) == Some("-server") && args.len() >= 2 {
        server = args.remove(1);
        args.remove(0);
    }
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let code = match keel_client::cli::run_cli_split(&server, args, &mut out, &mut err).await {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "{}", keel_client::cli::keeper_message(&e, None));
            1
        }
    };
    let _ = out.flush();
    std::process::exit(code);
}
