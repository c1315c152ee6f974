//! The manual's pages, without a server: the front page (`README.md`) links every page under
//! `docs/`, and every relative link of the manual reaches an existing file, and an existing
//! heading where it names one. (Each page's examples are checked where they run: see
//! `docs/development.md`, "How this manual is checked".)

mod links;
mod markdown;
