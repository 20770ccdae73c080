#!/bin/bash
sleep 30
touch /app/done
