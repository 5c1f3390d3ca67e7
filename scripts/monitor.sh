#!/bin/bash
exec /usr/bin/ipfailover run "$@"
