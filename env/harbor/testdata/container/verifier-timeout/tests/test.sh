#!/bin/bash
sleep 60
echo 1 > /logs/verifier/reward.txt
