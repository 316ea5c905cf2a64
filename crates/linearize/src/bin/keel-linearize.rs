//! `keel-linearize [--max-states N] HISTORY.jsonl` (or `-` for stdin):
//! checks a recorded ZooKeeper history for linearizability (the format is
//! documented in `keel_linearize::jsonl`) and prints a summary.
//!
//! Exit status: 0 linearizable, 1 not linearizable (the report names the
//! partition, the longest linearizable prefix and what could not follow),
//! 2 undecided (the search budget ran out), 3 bad usage or an invalid file.

use std::fs::File;
use std::io::{self, BufReader};
use std::process::ExitCode;
use std::time::Instant;

use keel_linearize::jsonl::{read_history, Summary};
use keel_linearize::{check, Budget, Outcome};

const USAGE: &str = "usage: keel-linearize [--max-states N] HISTORY.jsonl|-";

struct Args {
    path: String,
    budget: Budget,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut budget = Budget::default();
    let mut path = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--max-states" => {
                let value = args.next().ok_or("--max-states needs a value")?;
                budget.max_states = value
                    .parse()
                    .map_err(|_| format!("--max-states {value:?} is not a count"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            _ if path.is_none() => path = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    let path = path.ok_or("no history file given")?;
    Ok(Args { path, budget })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("keel-linearize: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(3);
        }
    };
    let read = if args.path == "-" {
        read_history(io::stdin().lock())
    } else {
        match File::open(&args.path) {
            Ok(f) => read_history(BufReader::new(f)),
            Err(e) => {
                eprintln!("keel-linearize: {}: {e}", args.path);
                return ExitCode::from(3);
            }
        }
    };
    let file = match read {
        Ok(file) => file,
        Err(e) => {
            eprintln!("keel-linearize: {}: {e}", args.path);
            return ExitCode::from(3);
        }
    };
    println!(
        "keel-linearize: {}; {} local reads not checked (sequential consistency only)",
        Summary::of(&file.ops),
        file.local_reads
    );
    let started = Instant::now();
    let outcome = check(&file.ops, args.budget);
    let seconds = started.elapsed().as_secs_f64();
    match outcome {
        Outcome::Linearizable => {
            println!("keel-linearize: linearizable (checked in {seconds:.2} s)");
            ExitCode::SUCCESS
        }
        Outcome::NotLinearizable { report } => {
            println!("{report}");
            println!("keel-linearize: NOT linearizable (checked in {seconds:.2} s)");
            ExitCode::from(1)
        }
        Outcome::Unknown { reason } => {
            println!("{reason}");
            println!(
                "keel-linearize: undecided: the search budget of {} states ran out ({seconds:.2} s)",
                args.budget.max_states
            );
            ExitCode::from(2)
        }
    }
}
