//! The Lua scripts, one `.lua` file each, hashed once and run with EVALSHA.

use std::sync::LazyLock;

use redis::Script;

macro_rules! granting_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/fence.lua"),
                include_str!(concat!("lua/", $file))
            ))
        })
    };
}

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))))
    };
}

pub(crate) static MUTEX_ACQUIRE: LazyLock<Script> = granting_script!("mutex_acquire.lua");
pub(crate) static MUTEX_RELEASE: LazyLock<Script> = script!("mutex_release.lua");
pub(crate) static MUTEX_EXTEND: LazyLock<Script> = script!("mutex_extend.lua");
pub(crate) static RENEW_BATCH: LazyLock<Script> = script!("renew_batch.lua");
