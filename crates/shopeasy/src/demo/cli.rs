//! The `shopeasy demo` command line: `--list`, and one subcommand per scene
//! whose `--help` is the scene's own long help and expected outcome (so
//! `shopeasy demo breaker --help` explains the breaker scene).
//!
//! The subcommands are built from [`Scene::ALL`] rather than written out as
//! a derived enum, so a scene's text lives once, in its module's `INFO`.

use std::process::ExitCode;

use clap::{ArgMatches, Args, Command, FromArgMatches, Subcommand, error::ErrorKind};

use super::{Endpoints, Run, Scene, Target};

/// `shopeasy demo`.
#[derive(Debug, Args)]
#[command(
    about = "Replay the lesson's patterns against the live system and print their timelines",
    long_about = "Replay a pattern of the lesson \"When the neighbour is slow: timeout, retry, \
circuit breaker\" against ShopEasy: start the embedded system with short settings on a \
temporary data folder (or use a running one with --target), break an edge through the \
fault API, send the traffic, print a timeline in the lesson's style and the measured \
figure, and stop. Exit 0 when the measured outcome is the lesson's, 1 when it is not.",
    after_help = "Examples:\n  shopeasy demo --list\n  shopeasy demo breaker\n  \
shopeasy demo breaker --help\n  shopeasy demo jitter --seed 42\n  \
shopeasy demo fallback --target http://127.0.0.1:8080"
)]
pub struct DemoArgs {
    /// List the scenes, one a line, with what each shows.
    #[arg(long)]
    pub list: bool,
    /// The scene to run.
    #[command(subcommand)]
    pub scene: Option<SceneCommand>,
}

/// A scene and how to run it.
#[derive(Debug, Clone)]
pub struct SceneCommand {
    /// The scene.
    pub scene: Scene,
    /// Its options.
    pub args: SceneArgs,
}

/// Every scene's options.
#[derive(Debug, Clone, Args)]
pub struct SceneArgs {
    /// Use a running ShopEasy instead of starting one: `URL` (the gateway)
    /// or `NAME=URL` for `gateway`, `faults` (the fault API) and
    /// `order-admin` (Order's admin listener); unnamed ones default to
    /// SPEC's ports on 127.0.0.1. Its settings are its own: the scene
    /// prints the ones its expectation assumes.
    #[arg(long, value_name = "[NAME=]URL")]
    pub target: Vec<String>,
    /// Seed of every random choice (jitter, the fault proxies), so a run
    /// can be repeated.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

impl SceneArgs {
    /// How to run the scene.
    ///
    /// # Errors
    /// A `--target` that does not parse.
    pub fn run(&self) -> anyhow::Result<Run> {
        let target = if self.target.is_empty() {
            Target::Embedded
        } else {
            Target::Running(Endpoints::parse(&self.target)?)
        };
        Ok(Run {
            target,
            seed: self.seed,
        })
    }
}

impl FromArgMatches for SceneCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, sub)) = matches.subcommand() else {
            return Err(clap::Error::raw(
                ErrorKind::MissingSubcommand,
                "name a scene (shopeasy demo --list)",
            ));
        };
        let scene = Scene::from_name(name).ok_or_else(|| {
            clap::Error::raw(ErrorKind::InvalidSubcommand, format!("no scene {name}"))
        })?;
        Ok(Self {
            scene,
            args: SceneArgs::from_arg_matches(sub)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Subcommand for SceneCommand {
    fn augment_subcommands(cmd: Command) -> Command {
        Scene::ALL.iter().fold(cmd, |cmd, scene| {
            let info = scene.info();
            // The texts after the arguments: `augment_args` would put the
            // options struct's own doc comment in their place.
            let scene = SceneArgs::augment_args(Command::new(info.name))
                .about(info.summary)
                .long_about(format!("{}\n\nExpected: {}.", info.help, info.expected));
            cmd.subcommand(scene)
        })
    }

    fn augment_subcommands_for_update(cmd: Command) -> Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        Scene::from_name(name).is_some()
    }
}

/// The `--list` text: each scene's name and summary, aligned.
pub fn list() -> String {
    let width = Scene::ALL
        .iter()
        .map(|s| s.info().name.len())
        .max()
        .unwrap_or(0);
    Scene::ALL
        .iter()
        .map(|s| format!("{:<width$}  {}\n", s.info().name, s.info().summary))
        .collect()
}

/// Runs `shopeasy demo`: the list, or one scene (exit 1 when its outcome
/// is not the lesson's, 2 for an unusable `--target`).
pub async fn main(args: &DemoArgs) -> ExitCode {
    let Some(command) = args.scene.as_ref().filter(|_| !args.list) else {
        print!("{}", list());
        return ExitCode::SUCCESS;
    };
    let run = match command.args.run() {
        Ok(run) => run,
        Err(e) => {
            eprintln!("shopeasy demo: {e:#}");
            return ExitCode::from(2);
        }
    };
    match super::run(command.scene, &run).await {
        Ok(outcome) => {
            print!("{outcome}");
            if outcome.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("shopeasy demo {}: {e:#}", command.scene);
            ExitCode::FAILURE
        }
    }
}
